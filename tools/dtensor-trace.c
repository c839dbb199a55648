/* dtensor-trace: merges per-rank trace files, renders one trace as the static timeline page,
 * and writes the trace studio (tools/studio/: view, compare, what-if) for one or more runs.
 *   dtensor-trace trace.json -o timeline.html
 *   dtensor-trace merge rank0.json rank1.json ... -o trace.json
 *   dtensor-trace studio -o page.html [NAME=]TRACE[,TRACE...] ... */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include <dtensor.h>

#include "studio_assets.h" /* generated from tools/studio/ by tools/embed_text.py */
#ifdef DT_HAVE_TORCH_TRACE
#include "torch_trace.h"
#endif

#define MAX_INPUTS 256

static void usage(void) {
    fprintf(stderr,
            "usage: dtensor-trace trace.json -o timeline.html\n"
            "       dtensor-trace merge a.json b.json ... -o merged.json\n"
            "       dtensor-trace studio -o page.html [NAME=]TRACE[,TRACE...] ...\n"
            "  studio: one run per argument; a run's per-rank files are joined with commas and\n"
            "  merged; NAME= names the run (default: its dt_run metadata, else the file name).\n"
            "  A run of torch.profiler traces (plain or .gz, one per rank) is converted first.\n");
}

/* One trace file's events appended to run (a JSON array). A file holds a Chrome trace in
 * dtensor's schema: an array of events, or an object with "traceEvents" (load_run converts a
 * PyTorch profiler's trace into it first). */
static int load_trace_file(const char *path, json_t *run, char *err, size_t cap) {
    json_error_t je;
    json_t *doc = json_load_file(path, 0, &je);
    if (!doc) {
        snprintf(err, cap, "cannot read trace \"%s\": %s (line %d)", path, je.text, je.line);
        return -1;
    }
    json_t *events = json_is_object(doc) ? json_object_get(doc, "traceEvents") : doc;
    if (!json_is_array(events)) {
        snprintf(err, cap,
                 "trace \"%s\": neither an array of events nor an object with traceEvents", path);
        json_decref(doc);
        return -1;
    }
    size_t i;
    json_t *e;
    json_array_foreach(events, i, e) {
        const char *ph = json_string_value(json_object_get(e, "ph"));
        if (!json_is_object(e) || !ph) {
            snprintf(err, cap, "trace \"%s\": event %zu is not an object with a \"ph\"", path, i);
            json_decref(doc);
            return -1;
        }
        if (!strcmp(ph, "X") && (!json_is_number(json_object_get(e, "ts")) ||
                                 !json_is_number(json_object_get(e, "dur")) ||
                                 !json_is_integer(json_object_get(e, "pid")))) {
            snprintf(err, cap, "trace \"%s\": complete event %zu lacks a numeric ts, dur or pid",
                     path, i);
            json_decref(doc);
            return -1;
        }
        json_array_append(run, e);
    }
    json_decref(doc);
    return 0;
}

/* Whether path holds a torch.profiler trace (gzip, or a JSON object whose head names
 * PyTorch's schemaVersion or distributedInfo) rather than one of dtensor's. */
static int is_torch_trace(const char *path) {
    char head[4096] = {0};
    FILE *f = fopen(path, "rb");
    if (!f) return 0; /* load_trace_file reports it */
    size_t n = fread(head, 1, sizeof head - 1, f);
    fclose(f);
    if (n >= 2 && (unsigned char)head[0] == 0x1f && (unsigned char)head[1] == 0x8b) return 1;
    return strstr(head, "\"schemaVersion\"") || strstr(head, "\"distributedInfo\"");
}

/* A PyTorch run (one torch.profiler file per rank) converted into dtensor's schema
 * (tools/torch_trace.c) in a temporary file, whose events are appended to run. */
static int load_torch_run(const char *const *paths, int n, json_t *run, char *err, size_t cap) {
#ifdef DT_HAVE_TORCH_TRACE
    const char *dir = getenv("TMPDIR") && *getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s/dtensor-trace-torch-XXXXXX", dir);
    int fd = mkstemp(tmp);
    if (fd < 0) {
        snprintf(err, cap, "cannot create a temporary file in %s: %s", dir, strerror(errno));
        return -1;
    }
    close(fd);
    int rc =
        dt_torch_trace_convert(paths, n, tmp, err, cap) ? -1 : load_trace_file(tmp, run, err, cap);
    unlink(tmp);
    return rc;
#else
    (void)n, (void)run;
    snprintf(err, cap,
             "trace \"%s\" is PyTorch's: this dtensor-trace was built without zlib, "
             "so it cannot convert it (install zlib1g-dev and rebuild)",
             paths[0]);
    return -1;
#endif
}

/* The run named by spec ([NAME=]file[,file...]) as {"name","files","events"}. */
static json_t *load_run(const char *spec, char *err, size_t cap) {
    const char *eq = strchr(spec, '='), *files = eq ? eq + 1 : spec;
    json_t *events = json_array(), *run = json_object();
    char *list = strdup(files), *save = NULL;
    const char *paths[MAX_INPUTS];
    int nfiles = 0;
    for (char *p = strtok_r(list, ",", &save); p && nfiles < MAX_INPUTS;
         p = strtok_r(NULL, ",", &save))
        paths[nfiles++] = p;
    if (!nfiles) {
        snprintf(err, cap, "run \"%s\": no trace file named", spec);
        goto fail;
    }
    if (is_torch_trace(paths[0])) {
        if (load_torch_run(paths, nfiles, events, err, cap)) goto fail;
    } else {
        for (int f = 0; f < nfiles; f++)
            if (load_trace_file(paths[f], events, err, cap)) goto fail;
    }
    /* The name: NAME=, else the dt_run metadata's, else the first file's base name. */
    char name[256];
    const char *base = strrchr(list, '/') ? strrchr(list, '/') + 1 : list;
    snprintf(name, sizeof name, "%.*s", eq ? (int)(eq - spec) : (int)strcspn(base, "."),
             eq ? spec : base);
    size_t i;
    json_t *e;
    json_array_foreach(events, i, e) {
        const char *n = json_string_value(json_object_get(e, "name"));
        const char *rn = json_string_value(json_object_get(json_object_get(e, "args"), "name"));
        if (!eq && n && rn && *rn && !strcmp(n, "dt_run")) {
            snprintf(name, sizeof name, "%s", rn);
            break;
        }
    }
    json_object_set_new(run, "name", json_string(name));
    json_object_set_new(run, "files", json_string(files));
    json_object_set_new(run, "events", events);
    free(list);
    return run;
fail:
    free(list);
    json_decref(events);
    json_decref(run);
    return NULL;
}

/* JSON inside <script>: '<' only occurs in strings, where \u003c means the same and no
 * "</script>" can end the element early. */
static void put_script_json(FILE *f, const char *s) {
    for (; *s; s++)
        if (*s == '<')
            fputs("\\u003c", f);
        else
            fputc(*s, f);
}

static int write_studio(const char *out, const char *const *specs, int n) {
    char err[1024];
    json_t *runs = json_array();
    for (int i = 0; i < n; i++) {
        json_t *run = load_run(specs[i], err, sizeof err);
        if (!run) {
            fprintf(stderr, "dtensor-trace studio: %s\n", err);
            json_decref(runs);
            return 1;
        }
        json_array_append_new(runs, run);
    }
    char *text = json_dumps(runs, JSON_COMPACT);
    json_decref(runs);
    FILE *f = text ? fopen(out, "w") : NULL;
    if (!f) {
        fprintf(stderr, "dtensor-trace studio: cannot write \"%s\": %s\n", out, strerror(errno));
        free(text);
        return 1;
    }
    fprintf(f,
            "<!doctype html>\n<html><head><meta charset=\"utf-8\">\n"
            "<title>dtensor trace studio</title>\n<style>\n%s</style></head>\n<body>\n"
            "<script type=\"application/json\" id=\"dt-runs\">",
            studio_css);
    put_script_json(f, text);
    fprintf(f, "</script>\n<script>\n%s\n%s\n%s\n%s\n</script>\n</body></html>\n", studio_model_js,
            studio_whatif_js, studio_view_js, studio_main_js);
    free(text);
    int bad = ferror(f);
    if (fclose(f) || bad) {
        fprintf(stderr, "dtensor-trace studio: writing \"%s\" failed\n", out);
        return 1;
    }
    return 0;
}

int main(int argc, char **argv) {
    const char *out = NULL;
    const char *inputs[MAX_INPUTS];
    int nin = 0, merge = argc > 1 && !strcmp(argv[1], "merge");
    int studio = argc > 1 && !strcmp(argv[1], "studio");
    for (int i = 1 + merge + studio; i < argc; i++) {
        if (!strcmp(argv[i], "-o") && i + 1 < argc)
            out = argv[++i];
        else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help"))
            return usage(), 0;
        else if (argv[i][0] == '-') {
            fprintf(stderr, "dtensor-trace: unknown option \"%s\"\n", argv[i]);
            return usage(), 2;
        } else if (nin < MAX_INPUTS)
            inputs[nin++] = argv[i];
        else
            return fprintf(stderr, "dtensor-trace: more than %d inputs\n", MAX_INPUTS), 2;
    }
    if (!out || nin < 1 || (!merge && !studio && nin != 1)) return usage(), 2;
    if (studio) return write_studio(out, inputs, nin);
    if (merge) {
        if (dt_trace_merge(inputs, nin, out) != DT_OK)
            return fprintf(stderr, "dtensor-trace: %s\n", dt_last_error()), 1;
        return 0;
    }
    if (dt_trace_render_html(inputs[0], out) != DT_OK)
        return fprintf(stderr, "dtensor-trace: %s\n", dt_last_error()), 1;
    return 0;
}
