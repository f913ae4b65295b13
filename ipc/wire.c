/* wire.c — serialisation of wire.h's commands and replies. */
#include "ipc/wire.h"
