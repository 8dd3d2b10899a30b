/* fixture_no_entry: a well-formed shared library that is not a Plexus plugin. It exports a
 * function, but not plexus_plugin_entry_v1.
 *
 * Exercises the host's check for the entry symbol: dlopen succeeds, dlsym does not, and the
 * refusal must name the file and the missing symbol. (Built without the plugin version script,
 * which would hide the export below.) */
#include "plexus/abi.h"

PLX_EXPORT int fixture_no_entry_answer(void);

PLX_EXPORT int fixture_no_entry_answer(void) { return 42; }
