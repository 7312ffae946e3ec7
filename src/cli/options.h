/* One option table per subcommand: it parses argv and prints --help, so the two never disagree.
 * Numbers are parsed with end-pointer and range checks; unknown flags and bad values are errors. */
#ifndef HYLA_CLI_OPTIONS_H
#define HYLA_CLI_OPTIONS_H

#include <stdint.h>
#include <stdio.h>

#include "io/safetensors.h"

typedef enum { OPT_FLAG, OPT_INT, OPT_DOUBLE, OPT_STRING } opt_kind;

typedef struct {
    const char *name;    /* "--steps" */
    opt_kind kind;
    void *dst;           /* int* for FLAG, int64_t* for INT, double* for DOUBLE, const char** for STRING */
    const char *metavar; /* "N", "FILE"; NULL for flags */
    const char *help;
    int64_t min, max;    /* INT range (inclusive) */
} hyla_opt;

typedef struct {
    const char *name;     /* "inspect" */
    const char *synopsis; /* "PATH [options]" */
    const char *summary;
    const hyla_opt *opts; /* terminated by {0} */
    int min_positional, max_positional;
    unsigned char *given; /* optional [number of opts]: set to 1 for each option on the command line */
} hyla_command_spec;

/* Was option `name` on the command line (spec->given must have been set for the parse)? */
int hyla_opt_given(const hyla_command_spec *spec, const char *name);

/* Parses argv[1..] (argv[0] is the subcommand). Returns 0 on success, 1 if --help was printed,
 * or -1 after printing an error. Positionals go to pos[0..*n_pos). */
int hyla_opts_parse(const hyla_command_spec *spec, int argc, char **argv, const char **pos, int *n_pos);
void hyla_opts_usage(FILE *f, const hyla_command_spec *spec);

/* A --dtype value: f32, bf16 or f16. Returns -1 after printing an error naming cmd and flag. */
int hyla_parse_dtype_flag(const char *cmd, const char *flag, const char *text, hyla_dtype *out);

/* Parse "1,2,3" into a malloc'd int32 array. Returns -1 after printing an error. */
int hyla_parse_int_list(const char *flag, const char *text, int32_t **out, int64_t *count);

#endif
