/* What dtensor-explain shares with the propagation conformance test: op text ("mm",
 * "mean(dim=0)", a registered op's name) to an op and its arguments (explain_ops.c), and
 * propagation rows read from a table and checked (explain_cases.c). The test checks the same
 * rows with the same code, answering them with dispatch on real ranks as well. */
#ifndef DT_TOOLS_EXPLAIN_H
#define DT_TOOLS_EXPLAIN_H

#include <stdio.h>

#include <dtensor.h>

/* ---- op text (explain_ops.c) ---------------------------------------------------------------
 * name, or name(arguments), as the conformance rows write ops:
 *   mm, add, relu, where, embedding, ...        no arguments
 *   mul_scalar(2), mul(scalar), add(scalar=3)   scalar forms (pow, add, mul)
 *   sum, mean(dim=0), amax(dim=0,1,keepdim), var(dim=1,correction=0)
 *   argmax(dim=1), softmax(dim=-1), cat(dim=0), squeeze(dim=0), unsqueeze(dim=1)
 *   stack(dim=0), stack (dim 0), swiglu
 *   transpose(0,1), t, permute(2,0,1)
 *   view(48), view(8,6->48), reshape(4,-1), expand(4,8)
 *   slice(dim=1,start=8,end=16), slice([:,8:])
 *   layer_norm, layer_norm(last), layer_norm(last=2,eps=1e-5), rms_norm(eps=1e-6)
 *   scaled_dot_product_attention(causal), sdpa, rope
 *   dropout(0.1), dropout(p=0.1,seed=7,offset=4)
 *   cross_entropy(mean), cross_entropy(none,ignore_index=-1),
 *   cross_entropy(sum,label_smoothing=0.1)
 *   scatter_add(dim=0,shape=[11,6])
 * and any op registered with dt_op_register, by its name (no arguments). */

/* text -> op and args. in: the inputs' specs (slice's open end and view's "a->b" read input
 * 0). DT_ERR_UNSUPPORTED when no op has that name, DT_ERR_PARSE for malformed arguments; the
 * message says which. */
dt_status explain_op_parse(const char *text, int n, const dt_spec *in, dt_op *op_out,
                           dt_op_args *args_out);
/* The text explain_op_parse reads back as op with args (its canonical form). */
dt_status explain_op_format(dt_op op, const dt_op_args *args, char *buf, size_t cap);
/* The dtype rows give input i of op unless they say otherwise: i64 for indices and class
 * labels (embedding, pick, cross_entropy), else f32. */
dt_dtype explain_op_input_dtype(dt_op op, int i);

/* ---- propagation rows (explain_cases.c) ----------------------------------------------------
 * Tab-separated, a header row naming the columns (any order, others ignored), as
 * tests/conformance/propagation_cases.tsv: id, op, input_shapes ("12,8 ; 8,16"; "()" for a
 * 0-D input), input_placements ("S(0) ; R", one placement per mesh dim each),
 * expected_output_placements ("S(0)", alternatives with " OR "), expected_input_redistribution
 * ("none", or "inK: cur->want [all_to_all[dim0]]" per input changed, alternatives with " OR ",
 * "[S(1)] ..." naming an alternative's output), mesh_shape ("4", "2x2"); optionally
 * input_dtypes ("f32 ; i64"). */
#define EXPLAIN_MAX_COLL 16

typedef struct explain_row {
    int line;
    char id[32], op_text[128], mesh_text[64], shapes[256], placements[256];
    char want_out[256], want_redist[1024];
    dt_op op;
    dt_op_args args;
    int mesh_ndim, mesh_shape[DT_MESH_MAX_NDIM];
    int n;
    dt_spec in[DT_OP_MAX_USER_INPUTS];
} explain_row;

/* What an engine saw for a row: the output placements and the collectives its inputs'
 * redistributions issue, as "all_to_all[dim0]" ("[dim0+dim1]" for a fused one). */
typedef struct explain_seen {
    dt_placement out[DT_MESH_MAX_NDIM];
    int ncoll;
    char coll[EXPLAIN_MAX_COLL][64];
    int kinds_only; /* the collectives' mesh dims are unknown ("[?]"): compare counts only */
} explain_seen;

/* Answers a row. DT_OK with *seen filled; DT_ERR_UNSUPPORTED (with a message) skips the row;
 * any other status is an error on that row. */
typedef dt_status (*explain_engine)(const explain_row *row, explain_seen *seen, void *user);

/* The engine of dtensor-explain: dt_op_choose, no ranks. user: the cost model (const
 * dt_cost_model *), NULL for the default. */
dt_status explain_engine_choose(const explain_row *row, explain_seen *seen, void *user);

/* Appends the collectives of a plan to seen (local steps are not listed). */
void explain_seen_add_plan(explain_seen *seen, const dt_plan *plan);

typedef struct explain_totals {
    int rows, passed, differ, skipped, errors;
} explain_totals;

/* Checks every row of the table at path with engine: one line per row on out ("P002 mm: pass",
 * "X1 mm ...: differs: got ..., expected ..." with file:line, "...: skipped: why"), then a
 * summary line. strict: a skipped row counts as a difference. Returns 0 when every row passed
 * (or was skipped, unless strict), 1 when one differs or fails, 2 when the table cannot be
 * opened or read, lacks a column or has no rows (a line on out names the file). *totals
 * (nullable) is set on every return, all zero when no row was read. */
int explain_check_file(const char *path, explain_engine engine, void *user, int strict, FILE *out,
                       explain_totals *totals);

/* "12,8 ; 8,16" and "S(0) ; R" (and "f32 ; i64" or NULL) on a mesh "2x2" or "dp=2,tp=2" -> the
 * row's inputs and mesh; the op text then gives op and args. DT_OK, or a status and message. */
dt_status explain_row_parse(explain_row *row, const char *op_text, const char *mesh,
                            const char *shapes, const char *placements, const char *dtypes);

#endif
