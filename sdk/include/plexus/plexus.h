/* Plexus SDK: everything a plugin written in C needs. C++ authors may prefer plexus/cpp/plugin.hpp. */
#ifndef PLEXUS_PLEXUS_H
#define PLEXUS_PLEXUS_H
#include "plexus/abi.h"
#include "plexus/comm.h"
#include "plexus/data_parallel.h"
#include "plexus/fusion.h"
#include "plexus/host.h"
#include "plexus/layer.h"
#include "plexus/mhc.h"
#include "plexus/plugin.h"
#include "plexus/scheduler.h"
#include "plexus/stack.h"
#include "plexus/tensor.h"
#include "plexus/topology.h"
#endif
