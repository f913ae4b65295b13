/* version.c — the library's version string, from configure. */
#include "config.h"
#include "nanollm.h"

const char *nl_version(void)
{
    return PACKAGE_VERSION;
}
