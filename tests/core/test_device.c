/* Devices on a machine of any kind: the caching allocator over a counting raw allocator (the
 * same code that sits over cudaMalloc), and the device calls' behaviour where no GPU is usable
 * (clear errors, CPU tensors unaffected, host copies of shards). The GPU itself is checked by
 * `make gpu-check` (tests/gpu/gpu_check.c). */
#include <pthread.h>
#include <stdlib.h>

#include "core/cache_alloc.h"
#include "helpers.h"

/* A raw allocator with a budget, counting its calls. */
typedef struct raw {
    pthread_mutex_t mu;
    size_t budget, used;
    int allocs, frees;
} raw;

static void *raw_alloc(void *u, size_t bytes) {
    raw *r = u;
    pthread_mutex_lock(&r->mu);
    void *p = NULL;
    if (r->used + bytes <= r->budget && (p = malloc(bytes + sizeof(size_t)))) {
        *(size_t *)p = bytes;
        p = (size_t *)p + 1;
        r->used += bytes;
        r->allocs++;
    }
    pthread_mutex_unlock(&r->mu);
    return p;
}

static void raw_free(void *u, void *p) {
    raw *r = u;
    size_t *h = (size_t *)p - 1;
    pthread_mutex_lock(&r->mu);
    r->used -= *h;
    r->frees++;
    pthread_mutex_unlock(&r->mu);
    free(h);
}

static dt_cache_alloc *make(raw *r, size_t budget) {
    *r = (raw){.budget = budget};
    pthread_mutex_init(&r->mu, NULL);
    dt_cache_alloc *a = dt_cache_alloc_create(
        (dt_cache_backend){.raw_alloc = raw_alloc, .raw_free = raw_free, .user = r});
    cr_assert_not_null(a);
    return a;
}

Test(cache_alloc, size_classes_waste_at_most_a_quarter) {
    for (size_t b = 1; b < ((size_t)1 << 34); b = b * 3 / 2 + 7) {
        size_t r = dt_cache_alloc_round(b);
        cr_assert_geq(r, b, "round(%zu) = %zu", b, r);
        if (b <= (1u << 20)) cr_assert_eq(r % 512, 0, "round(%zu) = %zu", b, r);
        else cr_assert_leq(r, b + b / 4, "round(%zu) = %zu wastes over 25%%", b, r);
        cr_assert_eq(dt_cache_alloc_round(r), r, "a class size rounds to itself");
    }
}

Test(cache_alloc, reuses_a_block_on_its_stream_only) {
    raw r;
    dt_cache_alloc *a = make(&r, (size_t)1 << 30);
    int s1, s2; /* stream tokens */
    void *p = dt_cache_alloc_get(a, 1000, &s1);
    cr_assert_eq(dt_cache_alloc_put(a, p), 0);
    cr_assert_eq(dt_cache_alloc_get(a, 900, &s1), p, "same class, same stream: reused");
    cr_assert_eq(dt_cache_alloc_put(a, p), 0);
    void *q = dt_cache_alloc_get(a, 900, &s2);
    cr_assert_neq(q, p, "a block freed on one stream is not handed to another");
    void *big = dt_cache_alloc_get(a, 5u << 20, &s1);
    cr_assert_neq(big, p, "another class: a new block");
    dt_memory_stats st;
    dt_cache_alloc_stats(a, &st);
    cr_assert_eq(st.device_allocs, 3);
    cr_assert_eq(st.requests, 4);
    cr_assert_eq(st.in_use, 1024 + dt_cache_alloc_round(5u << 20));
    cr_assert_eq(st.cached, 1024, "p waits in the cache");
    cr_assert_eq(st.peak, st.in_use);
    dt_cache_alloc_put(a, q);
    dt_cache_alloc_put(a, big);
    dt_cache_alloc_empty(a);
    dt_cache_alloc_stats(a, &st);
    cr_assert_eq(st.cached, 0);
    cr_assert_eq(st.in_use, 0);
    cr_assert_eq(r.frees, 3);
    cr_assert_eq(r.used, 0);
    dt_cache_alloc_destroy(a);
}

Test(cache_alloc, steady_state_never_reaches_the_raw_allocator) {
    raw r;
    dt_cache_alloc *a = make(&r, (size_t)1 << 30);
    static const size_t sizes[] = {4096, 1u << 20, 3u << 20, 77, 4096, 12345678, 512};
    void *p[7];
    int s;
    for (int it = 0; it < 50; it++) {
        for (int i = 0; i < 7; i++) p[i] = dt_cache_alloc_get(a, sizes[i], &s);
        for (int i = 6; i >= 0; i--) dt_cache_alloc_put(a, p[i]);
        if (it == 0) cr_assert_eq(r.allocs, 7);
    }
    cr_assert_eq(r.allocs, 7, "%d raw allocations after the first step", r.allocs - 7);
    dt_cache_alloc_destroy(a);
    cr_assert_eq(r.frees, 7);
}

Test(cache_alloc, empties_the_cache_and_retries_when_the_device_is_full) {
    raw r;
    dt_cache_alloc *a = make(&r, 8u << 20); /* an 8 MiB device */
    int s1, s2;
    void *x = dt_cache_alloc_get(a, 6u << 20, &s1);
    cr_assert_not_null(x);
    dt_cache_alloc_put(a, x); /* cached, holding 6 of the 8 MiB */
    void *y = dt_cache_alloc_get(a, 4u << 20, &s2);
    cr_assert_not_null(y, "the cached block must be given back to make room");
    dt_memory_stats st;
    dt_cache_alloc_stats(a, &st);
    cr_assert_eq(st.cached, 0);
    cr_assert_null(dt_cache_alloc_get(a, 6u << 20, &s2), "really out of memory: NULL");
    dt_cache_alloc_stats(a, &st);
    cr_assert_eq(st.in_use, 4u << 20, "a failed request changes nothing");
    int other;
    cr_assert_eq(dt_cache_alloc_put(a, &other), -1, "a pointer it never gave out");
    dt_cache_alloc_put(a, y);
    dt_cache_alloc_destroy(a);
    cr_assert_eq(r.used, 0);
}

typedef struct churn_arg {
    dt_cache_alloc *a;
    unsigned seed;
} churn_arg;

static void *churn(void *p) {
    churn_arg *c = p;
    void *held[16] = {0};
    for (int i = 0; i < 20000; i++) {
        int k = (int)(rand_r(&c->seed) % 16);
        if (held[k]) {
            if (dt_cache_alloc_put(c->a, held[k]) != 0) return (void *)1;
            held[k] = NULL;
        } else {
            /* a model allocates few distinct sizes, many times */
            static const size_t sizes[] = {100, 4096, 65536, 1u << 20, 3u << 20, 5000000};
            size_t bytes = sizes[rand_r(&c->seed) % 6];
            if (!(held[k] = dt_cache_alloc_get(c->a, bytes, c))) return (void *)1;
            memset(held[k], (int)k, bytes < 64 ? bytes : 64); /* it is really ours */
        }
    }
    for (int k = 0; k < 16; k++)
        if (held[k]) dt_cache_alloc_put(c->a, held[k]);
    return NULL;
}

Test(cache_alloc, threads_with_their_own_streams) {
    raw r;
    dt_cache_alloc *a = make(&r, (size_t)4 << 30);
    pthread_t th[4];
    churn_arg args[4];
    for (int i = 0; i < 4; i++) {
        args[i] = (churn_arg){a, (unsigned)(i + 1)};
        pthread_create(&th[i], NULL, churn, &args[i]);
    }
    for (int i = 0; i < 4; i++) {
        void *ret;
        pthread_join(th[i], &ret);
        cr_assert_null(ret, "thread %d failed", i);
    }
    dt_memory_stats st;
    dt_cache_alloc_stats(a, &st);
    cr_assert_eq(st.in_use, 0);
    cr_assert_eq(st.cached, r.used, "every raw byte is cached once nothing is in use");
    /* A thread holds at most 16 blocks of one size at once, and blocks are reused by exact
     * class: at most 16 raw blocks per thread and size, however long it runs. */
    cr_assert_leq(st.device_allocs, 4 * 16 * 6, "%llu raw of %llu requests",
                  (unsigned long long)st.device_allocs, (unsigned long long)st.requests);
    dt_cache_alloc_destroy(a);
    cr_assert_eq(r.used, 0);
}

/* ---- device calls where no GPU can be used ----------------------------------------------- */

static dt_status no_gpu_body(dt_ctx *ctx, void *arg) {
    (void)arg;
    dt_status st = dt_ctx_set_device(ctx, (dt_device){DT_DEVICE_CUDA, -1});
    R_CHECK(st == DT_ERR_UNSUPPORTED || st == DT_ERR_DEVICE, "set_device gave %s",
            dt_status_str(st));
    R_CHECK(strstr(dt_last_error(), "CUDA") || strstr(dt_last_error(), "cuda"),
            "message \"%s\" does not say CUDA", dt_last_error());
    R_CHECK(dt_ctx_device(ctx).kind == DT_DEVICE_CPU, "a failed set_device keeps the CPU");
    R_ERR(dt_ctx_set_device(ctx, (dt_device){(dt_device_kind)7, 0}), DT_ERR_ARG, "device.kind = 7");
    R_OK(dt_ctx_synchronize(ctx));
    dt_memory_stats ms;
    R_CHECK(dt_device_memory_stats((dt_device){DT_DEVICE_CPU, 0}, &ms) == DT_ERR_UNSUPPORTED,
            "the CPU has no caching allocator");

    /* Tensors stay on the CPU; to_device(CPU) is a real copy. */
    dt_mesh *mesh;
    int shape[] = {dt_ctx_size(ctx)};
    R_OK(dt_mesh_create(ctx, 1, shape, NULL, &mesh));
    float full[10];
    for (int i = 0; i < 10; i++) full[i] = (float)i;
    int64_t gs[] = {10};
    dt_placement s0 = {DT_PLACEMENT_SHARD, 0, DT_REDUCE_SUM};
    dt_tensor *t, *u;
    R_OK(dt_tensor_distribute(mesh, full, DT_F32, 1, gs, 1, &s0, DT_ALL_RANKS, &t));
    dt_tensor_info ti, ui;
    R_OK(dt_tensor_info_get(t, &ti));
    R_CHECK(ti.device.kind == DT_DEVICE_CPU, "distribute on a CPU rank gives a CPU tensor");
    /* A build without CUDA does not know the device; one with CUDA knows this rank has none. */
    R_ERR(dt_tensor_to_device(t, (dt_device){DT_DEVICE_CUDA, 0}, &u), st, "CUDA");
    R_OK(dt_tensor_to_device(t, (dt_device){DT_DEVICE_CPU, 0}, &u));
    R_OK(dt_tensor_info_get(u, &ui));
    R_CHECK(ui.local_data != ti.local_data || ti.local_numel == 0, "to_device copies");
    float host[4] = {0};
    R_ERR(dt_tensor_local_to_host(u, host, 0), ti.local_numel ? DT_ERR_SIZE : DT_OK, "");
    R_OK(dt_tensor_local_to_host(u, host, sizeof host));
    for (size_t i = 0; i < ui.local_numel; i++)
        R_CHECK(host[i] == (float)(ui.local_offset[0] + (int64_t)i), "element %zu", i);
    if (ui.local_numel) ((float *)ui.local_data)[0] = -1;
    R_CHECK(ti.local_numel == 0 || ((float *)ti.local_data)[0] == (float)ti.local_offset[0],
            "the copy is independent of the original");
    dt_tensor_release(u);
    dt_tensor_release(t);
    dt_mesh_release(mesh);
    return DT_OK;
}

Test(device, without_a_gpu_cuda_is_refused_clearly_and_cpu_tensors_work) {
    if (dt_cuda_device_count() > 0) cr_skip_test("a GPU is visible: gpu_check covers this machine");
    t_run(3, no_gpu_body, NULL); /* 10 over 3 ranks: 4, 4, 2 */
}
