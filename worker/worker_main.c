/* worker_main.c — nanollm-worker: one rank of the data plane. */
#include <stdio.h>

int main(void)
{
    fprintf(stderr, "nanollm-worker: not built yet\n");
    return 1;
}
