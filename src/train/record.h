/* The train-state record (record.c): what a step directory's blob holds besides the tensors,
 * as text a person can read ("dtensor-train-state 1", then one "key values" line each), and
 * its parser. Pure: no ranks, no files, no tensors. */
#ifndef DT_TRAIN_RECORD_H
#define DT_TRAIN_RECORD_H

#include <stddef.h>
#include <stdint.h>

#include "dtensor/create.h"
#include "dtensor/optim.h"

#define TR_MAGIC "dtensor-train-state 1"

typedef struct tr_record {
    int64_t step, data_pos;
    int has_gen, has_schedule, has_optim;
    dt_generator gen;
    dt_lr_schedule schedule;
    char kind[16]; /* dt_optim_kind's */
    double lr;
    /* the parameters saved ("tensor" lines), the optimizer's state tensors ("state"), and each
     * optimizer parameter's step count by the parameter's name ("steps"); names borrowed when
     * formatting, pointing into the record's own text after tr_record_parse */
    int ntensors, nstates, nsteps;
    const char **tensors, **states, **step_names;
    int64_t *steps;
    char *text; /* tr_record_parse's copy of the text */
} tr_record;

/* The record as text (malloc'd, NUL-terminated; *len_out without the NUL); NULL when out of
 * memory. Doubles are written with 17 significant digits, so they parse back exactly. */
char *tr_record_format(const tr_record *r, size_t *len_out);
/* One record from every rank's (texts[r], NUL-terminated), for ranks that hold different
 * parameters (pipeline stages): texts[0]'s lines but its tensor, state and steps lines, then
 * those lines of every text, sorted, each once. Malloc'd (*len_out without the NUL); NULL when
 * out of memory. */
char *tr_record_merge(char *const *texts, int n, size_t *len_out);
/* Parses text (len bytes) into *out (freed with tr_record_free whatever it returns):
 * DT_ERR_PARSE naming where (the blob's path) and the line at fault for a missing first line, an
 * unknown key, a malformed or repeated value, a negative step or count, or a schedule the
 * library would reject. */
dt_status tr_record_parse(const char *text, size_t len, tr_record *out, const char *where);
void tr_record_free(tr_record *r);
/* The index of name in names[0..n), or -1. */
int tr_find(const char *const *names, int n, const char *name);

#endif
