/* test_safetensors.c — the safetensors reader on good and crafted bad files.
 *
 * Files are written byte by byte here from the format's definition (8-byte
 * little-endian header length, JSON header, data), so the reference is the
 * format itself, not the project's writer.  Every bad file must fail with a
 * message that names the file and, where there is one, the tensor.
 */
#define _GNU_SOURCE
#include <check.h>
#include <fcntl.h>
#include <ftw.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/dtype.h"
#include "common/safetensors.h"
#include "tests/check_run.h"

static char tmpdir[64];

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    return remove(path);
}

static void setup(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/nl_st_XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(tmpdir));
}

static void teardown(void)
{
    nftw(tmpdir, rm_entry, 8, FTW_DEPTH | FTW_PHYS);
}

/* Writes tmpdir/name: header length (hlen, or the header's own length when
 * hlen is 0), header text, then data. */
static const char *write_raw(const char *name, uint64_t hlen, const char *header,
                             const void *data, size_t data_len)
{
    static char path[256];
    snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    uint64_t n = hlen ? hlen : strlen(header);
    uint8_t le[8];
    for (int i = 0; i < 8; i++) le[i] = (uint8_t)(n >> (8 * i));
    ck_assert_int_eq(fwrite(le, 1, 8, f), 8);
    ck_assert_int_eq(fwrite(header, 1, strlen(header), f), strlen(header));
    if (data_len) ck_assert_int_eq(fwrite(data, 1, data_len, f), data_len);
    ck_assert_int_eq(fclose(f), 0);
    return path;
}

static const char *write_st(const char *name, const char *header, size_t data_len)
{
    uint8_t *data = calloc(data_len ? data_len : 1, 1);
    for (size_t i = 0; i < data_len; i++) data[i] = (uint8_t)i;
    const char *p = write_raw(name, 0, header, data, data_len);
    free(data);
    return p;
}

/* Opens path (a file, or tmpdir when path is NULL) and expects failure with
 * status and a message containing both fragments. */
static void expect_fail(const char *path, nl_status status, const char *frag1, const char *frag2)
{
    st_model *m = (st_model *)1;
    nl_status st = path ? st_open_file(path, &m) : st_open(tmpdir, &m);
    ck_assert_msg(st == status, "status %d want %d: %s", st, status, nl_last_error());
    ck_assert_ptr_null(m);
    const char *msg = nl_last_error();
    ck_assert_msg(strstr(msg, frag1), "message lacks \"%s\": %s", frag1, msg);
    if (frag2) ck_assert_msg(strstr(msg, frag2), "message lacks \"%s\": %s", frag2, msg);
}

START_TEST(test_good_file)
{
    /* a: bf16 [2, 3] = 1, 2, ..., 6; b: f32 [2] = 0.5, -3; c: f16 [1] = 1. */
    uint16_t a[6];
    for (int i = 0; i < 6; i++) a[i] = nl_f32_to_bf16((float)(i + 1));
    float b[2] = {0.5f, -3.0f};
    uint16_t c = 0x3c00;
    uint8_t data[12 + 8 + 2];
    memcpy(data, a, 12);
    memcpy(data + 12, b, 8);
    memcpy(data + 20, &c, 2);
    const char *hdr =
        "{\"__metadata__\": {\"format\": \"pt\"},"
        " \"w.a\": {\"dtype\": \"BF16\", \"shape\": [2, 3], \"data_offsets\": [0, 12]},"
        " \"w.b\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [12, 20]},"
        " \"w.c\": {\"dtype\": \"F16\", \"shape\": [1], \"data_offsets\": [20, 22]},"
        " \"w.empty\": {\"dtype\": \"F32\", \"shape\": [0, 5], \"data_offsets\": [22, 22]}}    ";
    write_raw("model.safetensors", 0, hdr, data, sizeof data);

    st_model *m;
    ck_assert_int_eq(st_open(tmpdir, &m), NL_OK);
    ck_assert_uint_eq(st_count(m), 4);
    const st_tensor *ta = st_find(m, "w.a"), *tb = st_find(m, "w.b"), *tc = st_find(m, "w.c");
    ck_assert_ptr_nonnull(ta);
    ck_assert_ptr_null(st_find(m, "__metadata__"));
    ck_assert_ptr_null(st_find(m, "w.z"));
    ck_assert_int_eq(ta->dtype, NL_DTYPE_BF16);
    ck_assert_int_eq(ta->n_dims, 2);
    ck_assert_int_eq(ta->shape[0], 2);
    ck_assert_int_eq(ta->shape[1], 3);
    ck_assert_uint_eq(ta->nbytes, 12);
    float f[6];
    nl_convert_to_f32(f, ta->data, ta->dtype, 6);
    for (int i = 0; i < 6; i++) ck_assert_float_eq(f[i], (float)(i + 1));
    ck_assert_int_eq(tb->dtype, NL_DTYPE_F32);
    nl_convert_to_f32(f, tb->data, tb->dtype, 2);
    ck_assert_float_eq(f[0], 0.5f);
    ck_assert_float_eq(f[1], -3.0f);
    nl_convert_to_f32(f, tc->data, tc->dtype, 1);
    ck_assert_float_eq(f[0], 1.0f);
    ck_assert_uint_eq(st_find(m, "w.empty")->nbytes, 0);
    ck_assert_ptr_nonnull(strstr(ta->file, "model.safetensors"));
    /* st_get walks every tensor. */
    int seen = 0;
    for (size_t i = 0; i < st_count(m); i++) seen += st_find(m, st_get(m, i)->name) == st_get(m, i);
    ck_assert_int_eq(seen, 4);
    ck_assert_ptr_null(st_get(m, 4));
    st_close(m);
}
END_TEST

static const char *one_tensor =
    "{\"t.x\": {\"dtype\": \"BF16\", \"shape\": [4, 4], \"data_offsets\": [0, 32]}}";

START_TEST(test_truncated_data)
{
    const char *p = write_st("trunc.safetensors", one_tensor, 20);
    expect_fail(p, NL_ERR_FORMAT, "trunc.safetensors", "t.x");
}
END_TEST

START_TEST(test_truncated_header)
{
    /* The length promises 500 header bytes; the file ends long before. */
    const char *p = write_raw("short.safetensors", 500, one_tensor, NULL, 0);
    expect_fail(p, NL_ERR_FORMAT, "short.safetensors", "header length 500");
    p = write_raw("tiny.safetensors", 0, "", NULL, 0);
    /* 8 bytes of length 0: an empty header is not JSON. */
    expect_fail(p, NL_ERR_FORMAT, "tiny.safetensors", "JSON");
    char path[256];
    snprintf(path, sizeof path, "%s/stub.safetensors", tmpdir);
    FILE *f = fopen(path, "wb");
    fwrite("abc", 1, 3, f);
    fclose(f);
    expect_fail(path, NL_ERR_FORMAT, "stub.safetensors", "too short");
}
END_TEST

START_TEST(test_header_too_long)
{
    /* A sparse file large enough to hold the claimed header, so the size
     * limit and not the file size is what refuses it. */
    const uint64_t hlen = 150ull * 1000 * 1000;
    const char *p = write_raw("huge.safetensors", hlen, "{}", NULL, 0);
    ck_assert_int_eq(truncate(p, (off_t)(hlen + 64)), 0);
    expect_fail(p, NL_ERR_FORMAT, "huge.safetensors", "limit");
}
END_TEST

START_TEST(test_offsets_out_of_range)
{
    const char *p = write_st("oor.safetensors",
                             "{\"t.y\": {\"dtype\": \"F32\", \"shape\": [2], "
                             "\"data_offsets\": [8, 16]}}", 12);
    expect_fail(p, NL_ERR_FORMAT, "oor.safetensors", "t.y");
    p = write_st("rev.safetensors",
                 "{\"t.r\": {\"dtype\": \"F32\", \"shape\": [0], \"data_offsets\": [8, 4]}}", 12);
    expect_fail(p, NL_ERR_FORMAT, "rev.safetensors", "t.r");
    p = write_st("neg.safetensors",
                 "{\"t.n\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [-4, 0]}}", 12);
    expect_fail(p, NL_ERR_FORMAT, "neg.safetensors", "t.n");
    p = write_st("one.safetensors",
                 "{\"t.o\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0]}}", 12);
    expect_fail(p, NL_ERR_FORMAT, "one.safetensors", "t.o");
}
END_TEST

START_TEST(test_length_mismatch)
{
    /* [3, 3] bf16 needs 18 bytes; the offsets give 16. */
    const char *p = write_st("mis.safetensors",
                             "{\"t.m\": {\"dtype\": \"BF16\", \"shape\": [3, 3], "
                             "\"data_offsets\": [0, 16]}}", 32);
    expect_fail(p, NL_ERR_FORMAT, "mis.safetensors", "t.m");
    ck_assert_ptr_nonnull(strstr(nl_last_error(), "18"));
}
END_TEST

START_TEST(test_overflowing_shape)
{
    /* 2^32 * 2^32 * 2 bytes wraps to 0 in 64 bits, matching [0, 0]. */
    const char *p = write_st("ovf.safetensors",
                             "{\"t.big\": {\"dtype\": \"BF16\", \"shape\": [4294967296, "
                             "4294967296], \"data_offsets\": [0, 0]}}", 8);
    expect_fail(p, NL_ERR_FORMAT, "ovf.safetensors", "t.big");
    ck_assert_ptr_nonnull(strstr(nl_last_error(), "overflow"));
}
END_TEST

START_TEST(test_bad_shape)
{
    const char *p = write_st("negdim.safetensors",
                             "{\"t.s\": {\"dtype\": \"F32\", \"shape\": [-1], "
                             "\"data_offsets\": [0, 4]}}", 8);
    expect_fail(p, NL_ERR_FORMAT, "negdim.safetensors", "t.s");
    p = write_st("dims.safetensors",
                 "{\"t.d\": {\"dtype\": \"F32\", \"shape\": [1, 1, 1, 1, 1], "
                 "\"data_offsets\": [0, 4]}}", 8);
    expect_fail(p, NL_ERR_UNSUPPORTED, "dims.safetensors", "t.d");
    p = write_st("noshape.safetensors",
                 "{\"t.q\": {\"dtype\": \"F32\", \"data_offsets\": [0, 4]}}", 8);
    expect_fail(p, NL_ERR_FORMAT, "noshape.safetensors", "t.q");
}
END_TEST

START_TEST(test_unknown_dtype)
{
    const char *p = write_st("i8.safetensors",
                             "{\"t.q8\": {\"dtype\": \"I8\", \"shape\": [4], "
                             "\"data_offsets\": [0, 4]}}", 4);
    expect_fail(p, NL_ERR_UNSUPPORTED, "t.q8", "I8");
    ck_assert_ptr_nonnull(strstr(nl_last_error(), "i8.safetensors"));
    p = write_st("nodt.safetensors", "{\"t.nd\": {\"shape\": [1], \"data_offsets\": [0, 4]}}", 4);
    expect_fail(p, NL_ERR_FORMAT, "nodt.safetensors", "t.nd");
}
END_TEST

START_TEST(test_duplicate_name)
{
    const char *p = write_st("dup.safetensors",
                             "{\"t.first\": {\"dtype\": \"F32\", \"shape\": [1], "
                             "\"data_offsets\": [0, 4]}, \"t.dup\": {\"dtype\": \"F32\", "
                             "\"shape\": [1], \"data_offsets\": [0, 4]}, \"t.dup\": {\"dtype\": "
                             "\"F32\", \"shape\": [1], \"data_offsets\": [4, 8]}}", 8);
    expect_fail(p, NL_ERR_FORMAT, "dup.safetensors", "t.dup");
}
END_TEST

START_TEST(test_bad_json)
{
    const char *p = write_st("json.safetensors", "{\"t.j\": {\"dtype\": \"F32\",", 8);
    expect_fail(p, NL_ERR_FORMAT, "json.safetensors", "JSON");
    p = write_st("arr.safetensors", "[1, 2, 3]", 8);
    expect_fail(p, NL_ERR_FORMAT, "arr.safetensors", "object");
    p = write_st("entry.safetensors", "{\"t.e\": 5}", 8);
    expect_fail(p, NL_ERR_FORMAT, "entry.safetensors", "t.e");
}
END_TEST

static void write_index(const char *weight_map)
{
    char path[256];
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", tmpdir);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f, "{\"metadata\": {\"total_size\": 16}, \"weight_map\": %s}", weight_map);
    fclose(f);
}

static const char *shard1 =
    "{\"s.a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]},"
    " \"s.b\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [4, 8]}}";
static const char *shard2 =
    "{\"s.c\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]}}";

START_TEST(test_sharded)
{
    write_st("model-00001-of-00002.safetensors", shard1, 8);
    write_st("model-00002-of-00002.safetensors", shard2, 8);
    write_index("{\"s.a\": \"model-00001-of-00002.safetensors\","
                " \"s.c\": \"model-00002-of-00002.safetensors\","
                " \"s.b\": \"model-00001-of-00002.safetensors\"}");
    st_model *m;
    ck_assert_int_eq(st_open(tmpdir, &m), NL_OK);
    ck_assert_uint_eq(st_count(m), 3);
    const st_tensor *a = st_find(m, "s.a"), *b = st_find(m, "s.b"), *c = st_find(m, "s.c");
    ck_assert(a && b && c);
    /* One mapping per shard: tensors of a shard share its file. */
    ck_assert_ptr_eq(a->file, b->file);
    ck_assert_ptr_ne(a->file, c->file);
    ck_assert_ptr_nonnull(strstr(c->file, "model-00002-of-00002.safetensors"));
    ck_assert_int_eq(((const uint8_t *)c->data)[0], 0);
    ck_assert_int_eq(((const uint8_t *)b->data)[0], 4);
    st_close(m);
}
END_TEST

START_TEST(test_index_missing_shard)
{
    write_st("model-00001-of-00002.safetensors", shard1, 8);
    write_index("{\"s.a\": \"model-00001-of-00002.safetensors\","
                " \"s.c\": \"model-00002-of-00002.safetensors\"}");
    expect_fail(NULL, NL_ERR_IO, "model-00002-of-00002.safetensors", "index.json");
}
END_TEST

START_TEST(test_index_tensor_absent)
{
    write_st("model-00001-of-00002.safetensors", shard1, 8);
    write_st("model-00002-of-00002.safetensors", shard2, 8);
    /* s.b is promised in shard 2 but lives in shard 1. */
    write_index("{\"s.a\": \"model-00001-of-00002.safetensors\","
                " \"s.b\": \"model-00002-of-00002.safetensors\"}");
    expect_fail(NULL, NL_ERR_FORMAT, "s.b", "model-00002-of-00002.safetensors");
    write_index("{\"s.zz\": \"model-00001-of-00002.safetensors\"}");
    expect_fail(NULL, NL_ERR_FORMAT, "s.zz", "model-00001-of-00002.safetensors");
}
END_TEST

START_TEST(test_duplicate_across_shards)
{
    write_st("model-00001-of-00002.safetensors", shard1, 8);
    write_st("model-00002-of-00002.safetensors",
             "{\"s.a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}}", 8);
    write_index("{\"s.a\": \"model-00001-of-00002.safetensors\","
                " \"s.b\": \"model-00002-of-00002.safetensors\"}");
    expect_fail(NULL, NL_ERR_FORMAT, "s.a", "twice");
}
END_TEST

START_TEST(test_index_bad)
{
    write_st("model-00001-of-00001.safetensors", shard1, 8);
    write_index("{\"s.a\": \"../escape.safetensors\"}");
    expect_fail(NULL, NL_ERR_FORMAT, "s.a", "index.json");
    write_index("[]");
    expect_fail(NULL, NL_ERR_FORMAT, "weight_map", "index.json");
}
END_TEST

START_TEST(test_no_model)
{
    expect_fail(NULL, NL_ERR_IO, tmpdir, "model.safetensors");
    expect_fail("/nonexistent/x.safetensors", NL_ERR_IO, "/nonexistent/x.safetensors", NULL);
}
END_TEST

/* Nothing in the format aligns the data region: with an unpadded header of
 * odd length every tensor starts at an odd address and must still read
 * back exactly. */
START_TEST(test_unaligned_data)
{
    const char *hdr = "{\"a\":{\"dtype\":\"BF16\",\"shape\":[3],\"data_offsets\":[0,6]},"
                      "\"b\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[6,10]},"
                      "\"c\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[10,14]} }";
    ck_assert_int_eq(strlen(hdr) % 2, 1);
    /* bf16 1, -2, 3; f16 1, -5; f32 0.5, all little-endian */
    const uint8_t data[14] = {0x80, 0x3f, 0x00, 0xc0, 0x40, 0x40, 0x00, 0x3c,
                              0x00, 0xc5, 0x00, 0x00, 0x00, 0x3f};
    st_model *m;
    ck_assert_int_eq(st_open_file(write_raw("odd.safetensors", 0, hdr, data, sizeof data), &m),
                     NL_OK);
    const st_tensor *a = st_find(m, "a"), *b = st_find(m, "b"), *c = st_find(m, "c");
    ck_assert(a && b && c);
    ck_assert_int_eq((uintptr_t)a->data % 2, 1);
    float fa[3], fb[2], fc[1];
    nl_convert_to_f32(fa, a->data, a->dtype, 3);
    nl_convert_to_f32(fb, b->data, b->dtype, 2);
    nl_convert_to_f32(fc, c->data, c->dtype, 1);
    ck_assert(fa[0] == 1.0f && fa[1] == -2.0f && fa[2] == 3.0f);
    ck_assert(fb[0] == 1.0f && fb[1] == -5.0f);
    ck_assert(fc[0] == 0.5f);
    st_close(m);
}
END_TEST

START_TEST(test_bf16_f16_conversion)
{
    /* bf16 is the top half of the f32 bits, rounded to nearest even. */
    ck_assert_uint_eq(nl_f32_to_bf16(1.0f), 0x3f80);
    ck_assert_uint_eq(nl_f32_to_bf16(-2.0f), 0xc000);
    ck_assert_uint_eq(nl_f32_to_bf16(0.02f), 0x3ca4); /* 0x3ca3d70a rounds up */
    ck_assert_uint_eq(nl_f32_to_bf16(1.0f + 0x1p-8f), 0x3f80);      /* tie to even (down) */
    ck_assert_uint_eq(nl_f32_to_bf16(1.0f + 3 * 0x1p-8f), 0x3f82);  /* tie to even (up)   */
    ck_assert_uint_eq(nl_f32_to_bf16(1.0f + 0x1p-8f + 0x1p-20f), 0x3f81);
    ck_assert(isnan(nl_bf16_to_f32(nl_f32_to_bf16(NAN))));
    ck_assert_uint_eq(nl_f32_to_bf16(INFINITY), 0x7f80);
    ck_assert_float_eq(nl_bf16_to_f32(0x3f80), 1.0f);
    ck_assert_float_eq(nl_bf16_to_f32(0xbfc0), -1.5f);
    ck_assert_float_eq(nl_bf16_to_f32(0x0001), 0x1p-133f);
    /* f16: 1 = 0x3c00, max finite 65504 = 0x7bff, overflow to inf,
     * smallest subnormal 2^-24 = 0x0001. */
    ck_assert_uint_eq(nl_f32_to_f16(1.0f), 0x3c00);
    ck_assert_uint_eq(nl_f32_to_f16(65504.0f), 0x7bff);
    ck_assert_uint_eq(nl_f32_to_f16(1e5f), 0x7c00);
    ck_assert_uint_eq(nl_f32_to_f16(0x1p-24f), 0x0001);
    ck_assert_float_eq(nl_f16_to_f32(0xc000), -2.0f);
    ck_assert_float_eq(nl_f16_to_f32(0x0001), 0x1p-24f);
}
END_TEST

/* The value of an e4m3 code read off the OCP definition (bias 7, 3 mantissa
 * bits, subnormals below 2^-6, 0x7f / 0xff NaN), written apart from dtype.c. */
static double e4m3_value(int c)
{
    int sign = c >> 7, e = (c >> 3) & 15, m = c & 7;
    double mag = e == 0 ? m / 8.0 * pow(2.0, -6) : (1.0 + m / 8.0) * pow(2.0, e - 7);
    return sign ? -mag : mag;
}

/* The code of the e4m3 value nearest x by search over every finite code,
 * ties to the even code, |x| beyond 448 to +-448. */
static int e4m3_nearest(double x)
{
    int best = -1;
    double best_d = INFINITY;
    for (int c = 0; c < 256; c++) {
        if ((c & 0x7f) == 0x7f) continue; /* NaN */
        if (c == 0x80) continue;          /* -0: +0 stands for both */
        double d = fabs(x - e4m3_value(c));
        if (d < best_d || (d == best_d && (c & 1) == 0)) best = c, best_d = d;
    }
    if (x < 0 && best == 0) best = 0x80; /* the sign of a negative that rounds to zero */
    return best;
}

START_TEST(test_f8e4m3_conversion)
{
    ck_assert_uint_eq(nl_f32_to_f8e4m3(1.0f), 0x38);
    ck_assert_uint_eq(nl_f32_to_f8e4m3(-448.0f), 0xfe);
    ck_assert_uint_eq(nl_f32_to_f8e4m3(500.0f), 0x7e);      /* saturates */
    ck_assert_uint_eq(nl_f32_to_f8e4m3(-INFINITY), 0xfe);
    ck_assert_uint_eq(nl_f32_to_f8e4m3(0x1p-9f), 0x01);     /* smallest subnormal */
    ck_assert_uint_eq(nl_f32_to_f8e4m3(0x1p-11f), 0x00);    /* a quarter of it: zero */
    ck_assert_uint_eq(nl_f32_to_f8e4m3(1.0625f), 0x38);     /* tie to even (down) */
    ck_assert_uint_eq(nl_f32_to_f8e4m3(1.1875f), 0x3a);     /* tie to even (up) */
    ck_assert_uint_eq(nl_f32_to_f8e4m3(15.5f * 0x1p-10f), 0x08); /* 0x07.c: carries to 2^-6 */
    ck_assert_uint_eq(nl_f32_to_f8e4m3(NAN) & 0x7f, 0x7f);
    ck_assert(isnan(nl_f8e4m3_to_f32(0x7f)) && isnan(nl_f8e4m3_to_f32(0xff)));
    /* Every code decodes to its definition and encodes back to itself. */
    for (int c = 0; c < 256; c++) {
        if ((c & 0x7f) == 0x7f) continue;
        ck_assert_msg(nl_f8e4m3_to_f32((uint8_t)c) == (float)e4m3_value(c), "code 0x%02x", c);
        ck_assert_msg(nl_f32_to_f8e4m3(nl_f8e4m3_to_f32((uint8_t)c)) == c, "code 0x%02x", c);
    }
    /* Rounding: midpoints between neighbours (ties), points just off them,
     * and a log-spaced sweep over the whole range and past it. */
    for (int c = 0; c < 0x7e; c++) {
        float mid = (float)((e4m3_value(c) + e4m3_value(c + 1)) / 2); /* exact */
        float xs[] = {mid, nextafterf(mid, 0.0f), nextafterf(mid, 1e9f), -mid};
        for (size_t k = 0; k < sizeof xs / sizeof xs[0]; k++)
            ck_assert_msg(nl_f32_to_f8e4m3(xs[k]) == e4m3_nearest(xs[k]),
                          "x %.9g: got 0x%02x, nearest 0x%02x", (double)xs[k],
                          nl_f32_to_f8e4m3(xs[k]), e4m3_nearest(xs[k]));
    }
    for (double x = 1e-4; x < 1000; x *= 1.0137) {
        ck_assert_int_eq(nl_f32_to_f8e4m3((float)x), e4m3_nearest((float)x));
        ck_assert_int_eq(nl_f32_to_f8e4m3((float)-x), e4m3_nearest((float)-x));
    }
}
END_TEST

static Suite *safetensors_suite(void)
{
    Suite *s = suite_create("safetensors");
    TCase *tc = tcase_create("core");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_good_file);
    tcase_add_test(tc, test_truncated_data);
    tcase_add_test(tc, test_truncated_header);
    tcase_add_test(tc, test_header_too_long);
    tcase_add_test(tc, test_offsets_out_of_range);
    tcase_add_test(tc, test_length_mismatch);
    tcase_add_test(tc, test_overflowing_shape);
    tcase_add_test(tc, test_bad_shape);
    tcase_add_test(tc, test_unknown_dtype);
    tcase_add_test(tc, test_duplicate_name);
    tcase_add_test(tc, test_bad_json);
    tcase_add_test(tc, test_sharded);
    tcase_add_test(tc, test_index_missing_shard);
    tcase_add_test(tc, test_index_tensor_absent);
    tcase_add_test(tc, test_duplicate_across_shards);
    tcase_add_test(tc, test_index_bad);
    tcase_add_test(tc, test_no_model);
    tcase_add_test(tc, test_bf16_f16_conversion);
    tcase_add_test(tc, test_f8e4m3_conversion);
    tcase_add_test(tc, test_unaligned_data);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return check_run(safetensors_suite());
}
