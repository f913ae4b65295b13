/* launch_main.c — nanollm-launch: finds the command among the arguments,
 * installs the Ctrl-C handler and hands the command every other argument
 * (its parser takes the global and engine options wherever they are).
 *
 *   nanollm-launch [global options] COMMAND [options] ...
 *
 * Exit codes: 0 success, 1 runtime failure, 2 bad usage or bad input files,
 * 130 interrupted.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "leader/cli/cli.h"
#include "nanollm.h"

static void on_signal(int sig)
{
    (void)sig;
    nl_kill_all_workers();
    _exit(130);
}

static int install_signals(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGINT, &sa, NULL) != 0 || sigaction(SIGTERM, &sa, NULL) != 0) {
        perror("nanollm-launch: sigaction");
        return -1;
    }
    return 0;
}

/* The commands, by name. */
static const struct {
    const cli_command *cmd;
    int (*run_engine)(const nl_engine_config *, int, char **);     /* generate, batch, bench, serve */
    int (*run_tokenizer)(const char *, int, char **);                /* tokenize, detokenize   */
    int (*run_tool)(int, char **);                                   /* mkmodel                */
} commands[] = {
    {&cli_generate_command, cli_generate, NULL, NULL},
    {&cli_batch_command, cli_batch, NULL, NULL},
    {&cli_bench_command, cli_bench, NULL, NULL},
    {&cli_serve_command, cli_serve, NULL, NULL},
    {&cli_tokenize_command, NULL, cli_tokenize, NULL},
    {&cli_detokenize_command, NULL, cli_detokenize, NULL},
    {&cli_chat_template_command, NULL, cli_chat_template, NULL},
    {&cli_mkmodel_command, NULL, NULL, cli_mkmodel},
};
#define N_COMMANDS (sizeof(commands) / sizeof(commands[0]))

/* Whether the option argv[i] ("--name", not "--name=VALUE") takes the next
 * argument as its value, in any command: then that argument is not the
 * command's name. */
static bool takes_next(const char *arg)
{
    if (strncmp(arg, "--", 2) != 0 || arg[2] == '\0' || strchr(arg, '=')) return false;
    if (cli_option_takes_value(NULL, arg + 2)) return true;
    for (size_t k = 0; k < N_COMMANDS; k++)
        if (cli_option_takes_value(commands[k].cmd, arg + 2)) return true;
    return false;
}

/* The index of the command's name in argv, or argc when there is none. */
static int find_command(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--") == 0) return i + 1 < argc ? i + 1 : argc;
        if (a[0] != '-' || a[1] == '\0') return i;
        if (takes_next(a)) i++;
    }
    return argc;
}

/* No command: --help, --version, or a usage error. */
static int without_command(int argc, char **argv)
{
    static const cli_command none = {.name = NULL};
    cli_parser p;
    if (!cli_parser_init(&p, &none, NULL, argc - 1, argv + 1)) return 1;
    const char *v;
    int c;
    while ((c = cli_next(&p, &v)) != CLI_DONE && c != CLI_EXIT)
        ; /* only global options can come back to here */
    if (c == CLI_DONE)
        c = cli_usage_error(&p, "no command given (generate, batch, bench, serve, tokenize, detokenize, mkmodel)");
    cli_parser_free(&p);
    return p.exit;
}

int main(int argc, char **argv)
{
    int at = find_command(argc, argv);
    if (at >= argc) return without_command(argc, argv);
    const char *name = argv[at];
    size_t k = 0;
    while (k < N_COMMANDS && strcmp(commands[k].cmd->name, name) != 0) k++;
    if (k == N_COMMANDS) {
        fprintf(stderr, "nanollm-launch: unknown command '%s' (see --help)\n", name);
        return 2;
    }
    /* Every argument but the program's and the command's names, in order:
     * global options may come before or after the command. */
    int sub_argc = argc - 2;
    char **sub_argv = calloc((size_t)argc, sizeof(char *));
    if (!sub_argv) {
        fprintf(stderr, "nanollm-launch: out of memory\n");
        return 1;
    }
    for (int i = 1, j = 0; i < argc; i++)
        if (i != at) sub_argv[j++] = argv[i];
    if (install_signals() != 0) {
        free(sub_argv);
        return 1;
    }
    nl_engine_config config;
    nl_engine_config_init(&config);
    int rc;
    if (commands[k].run_engine) rc = commands[k].run_engine(&config, sub_argc, sub_argv);
    else if (commands[k].run_tokenizer) rc = commands[k].run_tokenizer(NULL, sub_argc, sub_argv);
    else rc = commands[k].run_tool(sub_argc, sub_argv);
    free(sub_argv);
    return rc;
}
