/* Subcommand entry points: each returns the process exit status. */
#ifndef HYLA_CLI_COMMANDS_H
#define HYLA_CLI_COMMANDS_H

#include <stdint.h>

int hyla_cmd_inspect(int argc, char **argv);
int hyla_cmd_forward(int argc, char **argv);
int hyla_cmd_init(int argc, char **argv);
int hyla_cmd_convert(int argc, char **argv);
int hyla_cmd_train(int argc, char **argv);
int hyla_cmd_generate(int argc, char **argv);
int hyla_cmd_serve(int argc, char **argv);
int hyla_cmd_eval(int argc, char **argv);
int hyla_cmd_merge(int argc, char **argv);
int hyla_cmd_tokenize(int argc, char **argv);
int hyla_cmd_plan(int argc, char **argv);

/* Print "hyla CMD: <library error message>" and return 1. */
int hyla_cli_fail(const char *cmd);
/* The tokenizer for --data-jsonl: `path` (--tokenizer) if given, else DIR/tokenizer.json (DIR may be
 * NULL: a model without a directory). */
struct hyla_tokenizer;
int hyla_cli_open_tokenizer(const char *path, const char *dir, struct hyla_tokenizer **tok);
/* Apply --threads (0 = leave OpenMP's default). */
void hyla_cli_set_threads(int64_t threads);

#endif
