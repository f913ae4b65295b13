/* test_decode_graphs.c — the decode step shapes captured as graphs and the
 * one a step replays: ascending sizes with the short-context twins of tiny
 * batches, and a pick that is never a shape too small or too short for the
 * step, and never a later one than the first that fits. */
#include <check.h>
#include <stdlib.h>

#include "tests/check_run.h"
#include "worker/decode_graphs.h"

static decode_graph_shape shapes[DECODE_GRAPHS_MAX];

START_TEST(test_shapes_of_a_large_engine)
{
    const int32_t n = decode_graph_shapes(512, 40960, shapes);
    const int32_t sizes[] = {1, 2, 4, 8, 16, 24, 32, 48, 64, 80, 96, 112, 128,
                             160, 192, 224, 256, 320, 384, 448, 512};
    const int32_t n_sizes = (int32_t)(sizeof sizes / sizeof sizes[0]);
    ck_assert_int_eq(n, n_sizes + 3); /* 1, 2 and 4 also under the short bound */
    int32_t k = 0;
    for (int32_t i = 0; i < n_sizes; i++) {
        if (sizes[i] <= 4) {
            ck_assert_int_eq(shapes[k].n_seqs, sizes[i]);
            ck_assert_int_eq(shapes[k++].max_ctx, 1024);
        }
        ck_assert_int_eq(shapes[k].n_seqs, sizes[i]);
        ck_assert_int_eq(shapes[k++].max_ctx, 40960);
    }
}
END_TEST

START_TEST(test_shapes_of_small_engines)
{
    /* the largest batch is captured itself; a model length at or under the
     * short bound needs no twins */
    ck_assert_int_eq(decode_graph_shapes(3, 1024, shapes), 3);
    ck_assert_int_eq(shapes[2].n_seqs, 3);
    ck_assert_int_eq(shapes[2].max_ctx, 1024);
    ck_assert_int_eq(decode_graph_shapes(3, 2048, shapes), 6);
    ck_assert_int_eq(shapes[4].n_seqs, 3);
    ck_assert_int_eq(shapes[4].max_ctx, 1024);
    ck_assert_int_eq(shapes[5].max_ctx, 2048);
    ck_assert_int_eq(decode_graph_shapes(1, 512, shapes), 1);
    ck_assert_int_eq(shapes[0].n_seqs, 1);
    ck_assert_int_eq(shapes[0].max_ctx, 512);
}
END_TEST

/* Many shapes: the list stops at DECODE_GRAPHS_MAX, still ascending. */
START_TEST(test_shapes_capped)
{
    const int32_t n = decode_graph_shapes(1 << 20, 40960, shapes);
    ck_assert_int_eq(n, DECODE_GRAPHS_MAX);
    for (int32_t i = 1; i < n; i++)
        ck_assert(shapes[i].n_seqs > shapes[i - 1].n_seqs ||
                  (shapes[i].n_seqs == shapes[i - 1].n_seqs &&
                   shapes[i].max_ctx > shapes[i - 1].max_ctx));
    ck_assert_int_eq(decode_graph_pick(shapes, n, shapes[n - 1].n_seqs + 1, 1), -1);
}
END_TEST

START_TEST(test_pick)
{
    const int32_t n = decode_graph_shapes(512, 40960, shapes);
    const int32_t i = decode_graph_pick(shapes, n, 1, 640);
    ck_assert_int_eq(shapes[i].n_seqs, 1);
    ck_assert_int_eq(shapes[i].max_ctx, 1024);
    int32_t j = decode_graph_pick(shapes, n, 1, 1024);
    ck_assert_int_eq(j, i);
    j = decode_graph_pick(shapes, n, 1, 1025);
    ck_assert_int_eq(shapes[j].n_seqs, 1);
    ck_assert_int_eq(shapes[j].max_ctx, 40960);
    j = decode_graph_pick(shapes, n, 3, 10);
    ck_assert_int_eq(shapes[j].n_seqs, 4);
    ck_assert_int_eq(shapes[j].max_ctx, 1024);
    j = decode_graph_pick(shapes, n, 5, 10);
    ck_assert_int_eq(shapes[j].n_seqs, 8);
    ck_assert_int_eq(decode_graph_pick(shapes, n, 513, 10), -1);
    ck_assert_int_eq(decode_graph_pick(shapes, n, 1, 40961), -1);
    /* every step: a shape that holds it, and no earlier one does */
    const int32_t lens[] = {1, 63, 1023, 1024, 1025, 4096, 40960};
    for (int32_t seqs = 1; seqs <= 512; seqs++)
        for (size_t l = 0; l < sizeof lens / sizeof lens[0]; l++) {
            const int32_t k = decode_graph_pick(shapes, n, seqs, lens[l]);
            ck_assert_int_ge(k, 0);
            ck_assert_int_ge(shapes[k].n_seqs, seqs);
            ck_assert_int_ge(shapes[k].max_ctx, lens[l]);
            for (int32_t e = 0; e < k; e++)
                ck_assert(shapes[e].n_seqs < seqs || shapes[e].max_ctx < lens[l]);
        }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("decode_graphs");
    TCase *tc = tcase_create("decode_graphs");
    tcase_add_test(tc, test_shapes_of_a_large_engine);
    tcase_add_test(tc, test_shapes_of_small_engines);
    tcase_add_test(tc, test_shapes_capped);
    tcase_add_test(tc, test_pick);
    suite_add_tcase(s, tc);
    return check_run(s);
}
