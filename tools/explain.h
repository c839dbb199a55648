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
 *   transpose(0,1), permute(2,0,1)
 *   view(48), view(8,6->48), reshape(4,-1), expand(4,8), broadcast_to(4,8)
 *   slice(dim=1,start=8,end=16), slice([:,8:])
 *   layer_norm, layer_norm(last), layer_norm(last=2,eps=1e-5), rms_norm(last=2,eps=1e-6):
 *   the last k dims normalised (torch's normalized_shape of k sizes; a weight of k dims
 *   says the same)
 *   scaled_dot_product_attention(causal), sdpa, rope
 *   dropout(0.1), dropout(p=0.1,seed=7,offset=4)
 *   cross_entropy(mean), cross_entropy(none,ignore_index=-1),
 *   cross_entropy(sum,label_smoothing=0.1)
 *   scatter_add(dim=0,shape=[11,6])
 * and any op registered with dt_op_register, by its name (no arguments). t and the calls that
 * are not one op are read by explain_call_parse (below). */

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

/* ---- calls (explain_forms.c) ---------------------------------------------------------------
 * What a row's op text names: an op, or a call of the C API that is not one dispatched op,
 * meaning what that call means:
 *   t                             dt_t: transpose(0,1) of a 2-D tensor, a 0-D or 1-D one as is
 *   broadcast_to(4,8)             torch's name of expand (dt_expand)
 *   unbind(dim=0)                 dt_unbind: the pieces (every one placed alike)
 *   split(dim=1,sizes=[2,4])      dt_split: the pieces
 *   zeros_like, ones_like, empty_like, full_like(2.5)            dt_tensor_*_like
 *   new_full(shape=[4,4],value=1) dt_tensor_new_full
 *   cast(dtype=f64)               dt_cast
 * Forms other than EXPLAIN_OP run several ops or none: dt_op_choose cannot answer them, and
 * explain_engine_run runs them on ranks. */
typedef enum explain_form {
    EXPLAIN_OP = 0,   /* op with args: dt_op_call */
    EXPLAIN_IDENTITY, /* t of a 0-D or 1-D tensor */
    EXPLAIN_UNBIND,   /* dim */
    EXPLAIN_SPLIT,    /* dim, sizes */
    EXPLAIN_ZEROS_LIKE,
    EXPLAIN_ONES_LIKE,
    EXPLAIN_EMPTY_LIKE,
    EXPLAIN_FULL_LIKE, /* value */
    EXPLAIN_NEW_FULL,  /* sizes (the new shape), value */
    EXPLAIN_CAST,      /* dtype */
    EXPLAIN_FORM_COUNT
} explain_form;

typedef struct explain_call {
    explain_form form;
    dt_op op;        /* EXPLAIN_OP */
    dt_op_args args; /* EXPLAIN_OP */
    int dim;         /* unbind, split */
    int nsizes;      /* split: the pieces' sizes; new_full: the new shape */
    int64_t sizes[DT_MAX_NDIM];
    double value;   /* full_like, new_full */
    dt_dtype dtype; /* cast */
} explain_call;

/* text -> call, as explain_op_parse (whose forms it reads too) with the forms above; in[0]'s
 * ndim decides what t means. */
dt_status explain_call_parse(const char *text, int n, const dt_spec *in, explain_call *out);
/* The text explain_call_parse reads back as call. */
dt_status explain_call_format(const explain_call *call, char *buf, size_t cap);
/* The dtype of input i when the row does not say. */
dt_dtype explain_call_input_dtype(const explain_call *call, int i);
/* The form's name ("unbind"); the op's for EXPLAIN_OP. */
const char *explain_call_name(const explain_call *call);

/* The C API's calls and their text: every public function of dtensor/ops.h and dtensor/create.h
 * that is no op's typed wrapper is listed here, with a text that reads as that call
 * (explain_c_calls: "dt_unbind" -> "unbind(dim=0)"), or with why rows cannot name it
 * (explain_no_text: "dt_total_norm" returns a double, not a tensor). test_op_coverage reads the
 * headers and fails on a function in neither list. */
typedef struct explain_c_call {
    const char *function, *text; /* text: a sample of its form; NULL in explain_no_text */
    const char *why;             /* explain_no_text: why it has no text */
} explain_c_call;
extern const explain_c_call explain_c_calls[], explain_no_text[];
extern const int explain_n_c_calls, explain_n_no_text;

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
    explain_call call;
    int mesh_ndim, mesh_shape[DT_MESH_MAX_NDIM];
    int n;
    dt_spec in[DT_OP_MAX_USER_INPUTS];
} explain_row;

/* What an engine saw for a row: the output placements and the collectives its inputs'
 * redistributions issue, as "all_to_all[dim0]" ("[dim0+dim1]" for a fused one). */
typedef struct explain_seen {
    dt_placement out[DT_MESH_MAX_NDIM];
    dt_dtype out_dtype; /* the output's (the first one's) */
    int out_ndim, nout; /* nout: how many outputs a run gave (unbind, split) */
    int64_t out_shape[DT_MAX_NDIM];
    int ncoll;
    char coll[EXPLAIN_MAX_COLL][64];
    int kinds_only; /* the collectives' mesh dims are unknown ("[?]"): compare counts only */
} explain_seen;

/* Answers a row. DT_OK with *seen filled; DT_ERR_UNSUPPORTED (with a message) skips the row;
 * any other status is an error on that row. */
typedef dt_status (*explain_engine)(const explain_row *row, explain_seen *seen, void *user);

/* dt_op_choose, no ranks: a dispatched op, and t of a 1-D tensor (its input as is). Other
 * forms and composites: DT_ERR_UNSUPPORTED. user: the cost model (const dt_cost_model *),
 * NULL for the default. */
dt_status explain_engine_choose(const explain_row *row, explain_seen *seen, void *user);

/* ---- running a call (explain_run.c) ---------------------------------------------------------
 * The row's call run on ranks of the local runtime (threads of this process) on generated
 * inputs: seen gets the output placements (a form with several outputs: the first, after
 * checking that all are placed alike) and the collectives the call issued, counted by
 * dt_comm_stats with their mesh dims. For what dt_op_choose cannot answer. */

/* Input i of row r on mesh: values generated from i and the element index (class ids in range
 * for index inputs), placed as the row says. Collective. */
dt_status explain_input_make(dt_mesh *mesh, const explain_row *r, int i, dt_tensor **out);
/* Runs r's call on in (this rank's tensors, made by explain_input_make) and, on mesh rank 0,
 * fills seen. Collective. */
dt_status explain_call_run(dt_ctx *ctx, const explain_row *r, dt_tensor *const *in,
                           explain_seen *seen);
/* The engine that runs every row (at most 64 ranks and 2^24 elements an input). */
dt_status explain_engine_run(const explain_row *row, explain_seen *seen, void *user);
/* dtensor-explain's engine: explain_engine_choose, and explain_engine_run for the rows it
 * cannot answer (composites and the forms above). user as explain_engine_choose's. */
dt_status explain_engine_tool(const explain_row *row, explain_seen *seen, void *user);
/* What dtensor-explain --op prints for a call it ran: the inputs, the output, the
 * collectives. */
dt_status explain_run_format(const explain_row *r, const explain_seen *seen, char *buf, size_t cap);

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

/* Strips leading and trailing spaces of s in place (the text forms' parsers). */
void explain_trim(char *s);
/* Splits a call's text "name(args)" into name (trimmed, cut to fit) and args (trimmed; "" when
 * there are no parentheses); DT_ERR_PARSE when the parentheses do not close at the end. */
#define EXPLAIN_NAME_MAX 64
#define EXPLAIN_ARGS_MAX 256
dt_status explain_split_call(const char *text, char name[EXPLAIN_NAME_MAX],
                             char args[EXPLAIN_ARGS_MAX]);

/* dtensor-explain --train-mesh (explain_train.c): one rank's view of a training step of
 * examples/train.c's model; argv as main's. Returns the exit code. */
int explain_train_main(int argc, char **argv);

#endif
