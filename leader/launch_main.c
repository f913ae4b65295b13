/* launch_main.c — nanollm-launch: parses options and runs a command. */
#include <stdio.h>

#include "nanollm.h"

int main(int argc, char **argv)
{
    (void)argc; (void)argv;
    fprintf(stderr, "nanollm-launch: not built yet\n");
    return 1;
}
