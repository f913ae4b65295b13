/* version.c — the library's version string, from configure, and the
 * commit it was built from, from make (nl_build_commit.h). */
#include "config.h"
#include "nanollm.h"
#include "nl_build_commit.h"

const char *nl_version(void)
{
    return PACKAGE_VERSION;
}

const char *nl_build_commit(void)
{
    return NL_BUILD_COMMIT[0] ? NL_BUILD_COMMIT : NULL;
}
