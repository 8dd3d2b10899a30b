/* The fixture's targets are configured, never compiled: any source will do. */
