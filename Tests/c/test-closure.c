/*
 * test-closure.c -- libffi trampolines and dynamic calls (DESIGN.md 5):
 * flux_closure_create/_code/_destroy and flux_call, every type letter as
 * argument and as return, mixed and maximal signatures, many closures on one
 * handler, trampolines as dispatcher callbacks (wait_for, failure), malformed
 * signatures with the position in the message, NULL arguments, and destroy
 * running exactly once.
 */
#include "helpers.h"

#include <float.h>
#include <inttypes.h>

/* ---- fixtures ------------------------------------------------------------ */

typedef struct counter {
    int destroyed;
} counter;

static void count_destroy(void *userdata)
{
    ((counter *)userdata)->destroyed++;
}

/* Creates a closure that must succeed (setup, not the subject of a check). */
static flux_closure *make_closure(const char *signature, flux_closure_handler handler,
                                  void *userdata, flux_destroy destroy)
{
    flux_closure *c = NULL;
    flux_status s = flux_closure_create(signature, handler, userdata, destroy, &c);
    if (s != FLUX_OK)
        diag("flux_closure_create(\"%s\") failed: %s", signature, flux_last_error());
    REQUIRE(s == FLUX_OK && c != NULL);
    REQUIRE(flux_closure_code(c) != NULL);
    return c;
}

/* Converts a trampoline's code (a data pointer) into a function pointer. */
#define FN(type, closure) ((type)(uintptr_t)flux_closure_code(closure))

/* ---- each letter as argument and as return: identity trampolines --------- */

/* Copies argument 0 to the return value, as the return letter's C type. */
#define ECHO_HANDLER(name, ctype)                                          \
    static void name(void *userdata, void *ret, void **args)               \
    {                                                                      \
        ++*(int *)userdata;                                                \
        *(ctype *)ret = *(ctype *)args[0];                                 \
    }
ECHO_HANDLER(echo_i, int32_t)
ECHO_HANDLER(echo_I, uint32_t)
ECHO_HANDLER(echo_l, int64_t)
ECHO_HANDLER(echo_L, uint64_t)
ECHO_HANDLER(echo_z, size_t)
ECHO_HANDLER(echo_f, float)
ECHO_HANDLER(echo_d, double)
ECHO_HANDLER(echo_p, void *)

static void test_each_letter_round_trips(void)
{
    int calls = 0;
    flux_closure *c;

    c = make_closure("i(i)", echo_i, &calls, NULL);
    is_int(FN(int32_t (*)(int32_t), c)(INT32_MIN), INT32_MIN, "i(i): INT32_MIN through a trampoline");
    is_int(FN(int32_t (*)(int32_t), c)(-7), -7, "i(i): -7 (negative, sign-extended)");
    is_int(FN(int32_t (*)(int32_t), c)(INT32_MAX), INT32_MAX, "i(i): INT32_MAX");
    EXPECT_OK(flux_closure_destroy(c));

    c = make_closure("I(I)", echo_I, &calls, NULL);
    is_uint(FN(uint32_t (*)(uint32_t), c)(UINT32_MAX), UINT32_MAX, "I(I): UINT32_MAX (zero-extended)");
    is_uint(FN(uint32_t (*)(uint32_t), c)(0x80000001u), 0x80000001u, "I(I): 0x80000001");
    EXPECT_OK(flux_closure_destroy(c));

    c = make_closure("l(l)", echo_l, &calls, NULL);
    is_int(FN(int64_t (*)(int64_t), c)(INT64_MIN), INT64_MIN, "l(l): INT64_MIN");
    is_int(FN(int64_t (*)(int64_t), c)(-1234567890123LL), -1234567890123LL, "l(l): -1234567890123");
    EXPECT_OK(flux_closure_destroy(c));

    c = make_closure("L(L)", echo_L, &calls, NULL);
    is_uint(FN(uint64_t (*)(uint64_t), c)(UINT64_MAX), UINT64_MAX, "L(L): UINT64_MAX");
    is_uint(FN(uint64_t (*)(uint64_t), c)(0x8000000000000001ull), 0x8000000000000001ull, "L(L): top bit set");
    EXPECT_OK(flux_closure_destroy(c));

    c = make_closure("z(z)", echo_z, &calls, NULL);
    is_uint(FN(size_t (*)(size_t), c)(SIZE_MAX), SIZE_MAX, "z(z): SIZE_MAX");
    is_uint(FN(size_t (*)(size_t), c)(42), 42, "z(z): 42");
    EXPECT_OK(flux_closure_destroy(c));

    c = make_closure("f(f)", echo_f, &calls, NULL);
    ok(FN(float (*)(float), c)(1.5f) == 1.5f, "f(f): 1.5f");
    ok(FN(float (*)(float), c)(-FLT_MAX) == -FLT_MAX, "f(f): -FLT_MAX");
    EXPECT_OK(flux_closure_destroy(c));

    c = make_closure("d(d)", echo_d, &calls, NULL);
    ok(FN(double (*)(double), c)(3.141592653589793) == 3.141592653589793, "d(d): pi");
    ok(FN(double (*)(double), c)(DBL_MIN) == DBL_MIN, "d(d): DBL_MIN");
    EXPECT_OK(flux_closure_destroy(c));

    c = make_closure("p(p)", echo_p, &calls, NULL);
    is_ptr(FN(void *(*)(void *), c)(&calls), &calls, "p(p): a pointer");
    is_ptr(FN(void *(*)(void *), c)(NULL), NULL, "p(p): NULL");
    EXPECT_OK(flux_closure_destroy(c));

    is_int(calls, 17, "every call reached the handler");
}

/* A handler that writes nothing: the trampoline returns 0 of every type. */
static void silent(void *userdata, void *ret, void **args)
{
    (void)args;
    ++*(int *)userdata;
    /* ret points at FLUX_CLOSURE_RET_SIZE zeroed bytes */
    const unsigned char *bytes = (const unsigned char *)ret;
    for (int i = 0; i < FLUX_CLOSURE_RET_SIZE; i++)
        if (bytes[i] != 0)
            ++*(int *)userdata; /* counted as an extra call: fails the check */
}

static void test_return_slot_is_zeroed(void)
{
    int calls = 0;
    flux_closure *c;
    c = make_closure("i()", silent, &calls, NULL);
    is_int(FN(int32_t (*)(void), c)(), 0, "i(): nothing written returns 0");
    EXPECT_OK(flux_closure_destroy(c));
    c = make_closure("I()", silent, &calls, NULL);
    is_uint(FN(uint32_t (*)(void), c)(), 0, "I(): nothing written returns 0");
    EXPECT_OK(flux_closure_destroy(c));
    c = make_closure("l()", silent, &calls, NULL);
    is_int(FN(int64_t (*)(void), c)(), 0, "l(): nothing written returns 0");
    EXPECT_OK(flux_closure_destroy(c));
    c = make_closure("L()", silent, &calls, NULL);
    is_uint(FN(uint64_t (*)(void), c)(), 0, "L(): nothing written returns 0");
    EXPECT_OK(flux_closure_destroy(c));
    c = make_closure("z()", silent, &calls, NULL);
    is_uint(FN(size_t (*)(void), c)(), 0, "z(): nothing written returns 0");
    EXPECT_OK(flux_closure_destroy(c));
    c = make_closure("f()", silent, &calls, NULL);
    ok(FN(float (*)(void), c)() == 0.0f, "f(): nothing written returns 0.0f");
    EXPECT_OK(flux_closure_destroy(c));
    c = make_closure("d()", silent, &calls, NULL);
    ok(FN(double (*)(void), c)() == 0.0, "d(): nothing written returns 0.0");
    EXPECT_OK(flux_closure_destroy(c));
    c = make_closure("p()", silent, &calls, NULL);
    is_ptr(FN(void *(*)(void), c)(), NULL, "p(): nothing written returns NULL");
    EXPECT_OK(flux_closure_destroy(c));
    is_int(calls, 8, "each handler ran once and saw FLUX_CLOSURE_RET_SIZE zero bytes at ret");
}

/* "zero-filled before each call": a call whose handler writes nothing
 * returns 0 even after a call that wrote all FLUX_CLOSURE_RET_SIZE bytes. */
static void write_on_odd_calls(void *userdata, void *ret, void **args)
{
    (void)args;
    if (++*(int *)userdata % 2 == 1)
        memset(ret, 0xFF, FLUX_CLOSURE_RET_SIZE);
}

static void test_return_slot_is_zeroed_before_every_call(void)
{
    int calls = 0;
    flux_closure *c = make_closure("L()", write_on_odd_calls, &calls, NULL);
    is_uint(FN(uint64_t (*)(void), c)(), UINT64_MAX, "L(): the first call wrote all 8 bytes");
    is_uint(FN(uint64_t (*)(void), c)(), 0, "L(): the next, writing nothing, returns 0");
    EXPECT_OK(flux_closure_destroy(c));
    c = make_closure("d()", write_on_odd_calls, &calls, NULL);
    (void)FN(double (*)(void), c)();
    ok(FN(double (*)(void), c)() == 0.0, "d(): likewise 0.0 after a call that wrote");
    EXPECT_OK(flux_closure_destroy(c));
}

/* A handler writing a whole 8 bytes for a 4-byte return stays harmless. */
static void write_eight(void *userdata, void *ret, void **args)
{
    (void)userdata;
    (void)args;
    int64_t v = -3;
    memcpy(ret, &v, FLUX_CLOSURE_RET_SIZE);
}

static void test_handler_may_fill_the_slot(void)
{
    flux_closure *c = make_closure("f()", write_eight, NULL, NULL);
    volatile int canary = 12345;
    float r = FN(float (*)(void), c)();
    (void)r;
    is_int(canary, 12345, "f(): a handler writing all FLUX_CLOSURE_RET_SIZE bytes for a float corrupts nothing");
    EXPECT_OK(flux_closure_destroy(c));
    c = make_closure("i()", write_eight, NULL, NULL);
    int32_t i = FN(int32_t (*)(void), c)();
    /* little-endian: the low half of -3 is -3 */
    const uint16_t probe = 1;
    if (*(const unsigned char *)&probe == 1)
        is_int(i, -3, "i(): an int64_t -3 written at ret returns (int32_t)-3 on little-endian");
    else
        ok(1, "i(): (big-endian, value not checked)");
    EXPECT_OK(flux_closure_destroy(c));
}

/* 'v' returns and 'v' arguments: ret is NULL, args not read. */
typedef struct sink {
    int calls;
    void *ret_seen;
    int32_t value;
} sink;

static void store_arg(void *userdata, void *ret, void **args)
{
    sink *s = (sink *)userdata;
    s->calls++;
    s->ret_seen = ret;
    s->value = *(int32_t *)args[0];
}

static void count_only(void *userdata, void *ret, void **args)
{
    (void)args;
    sink *s = (sink *)userdata;
    s->calls++;
    s->ret_seen = ret;
}

static void test_void_return(void)
{
    sink s = {0, &s, 0};
    flux_closure *c = make_closure("v(i)", store_arg, &s, NULL);
    FN(void (*)(int32_t), c)(-99);
    is_int(s.calls, 1, "v(i): the handler ran");
    is_int(s.value, -99, "v(i): it got the argument");
    is_ptr(s.ret_seen, NULL, "v(i): ret is NULL for a void return");
    EXPECT_OK(flux_closure_destroy(c));

    /* flux.h: the signature ends at its first NUL. */
    static const char with_junk[] = "v(i)\0junk";
    sink j = {0, &j, 0};
    c = make_closure(with_junk, store_arg, &j, NULL);
    FN(void (*)(int32_t), c)(7);
    is_int(j.value, 7, "\"v(i)\\0junk\" is read as \"v(i)\"");
    EXPECT_OK(flux_call(flux_closure_code(c), with_junk, NULL, (void *[]){&(int32_t){8}}));
    is_int(j.value, 8, "by flux_call too");
    EXPECT_OK(flux_closure_destroy(c));

    s.ret_seen = &s;
    c = make_closure("v()", count_only, &s, NULL);
    FN(void (*)(void), c)();
    is_int(s.calls, 2, "v(): a trampoline with no arguments and no result runs the handler");
    is_ptr(s.ret_seen, NULL, "v(): ret is NULL");
    EXPECT_OK(flux_call(flux_closure_code(c), "v()", NULL, NULL));
    is_int(s.calls, 3, "flux_call(\"v()\", ret NULL, args NULL) calls it");
    EXPECT_OK(flux_closure_destroy(c));
}

/* ---- mixed and maximal signatures ------------------------------------------ */

typedef struct mixed_seen {
    int32_t i;
    float f;
    double d;
    int64_t l;
    void *p;
    size_t z;
    uint32_t I;
    uint64_t L;
} mixed_seen;

/* "d(ifdlpzIL)": records the arguments, returns a checksum of them. */
static void mixed_handler(void *userdata, void *ret, void **args)
{
    mixed_seen *m = (mixed_seen *)userdata;
    m->i = *(int32_t *)args[0];
    m->f = *(float *)args[1];
    m->d = *(double *)args[2];
    m->l = *(int64_t *)args[3];
    m->p = *(void **)args[4];
    m->z = *(size_t *)args[5];
    m->I = *(uint32_t *)args[6];
    m->L = *(uint64_t *)args[7];
    *(double *)ret = m->i + m->f + m->d + (double)m->l + (double)m->z + m->I + (double)m->L;
}

static double mixed_native(int32_t i, float f, double d, int64_t l, void *p, size_t z,
                           uint32_t I, uint64_t L)
{
    (void)p;
    return i + f + d + (double)l + (double)z + I + (double)L;
}

typedef double (*mixed_fn)(int32_t, float, double, int64_t, void *, size_t, uint32_t, uint64_t);

static void test_mixed_signature(void)
{
    mixed_seen m;
    memset(&m, 0, sizeof m);
    flux_closure *c = make_closure("d(ifdlpzIL)", mixed_handler, &m, NULL);
    double want = mixed_native(-5, 0.25f, 1e10, -7000000000LL, &m, 12, 4000000000u, 1ull << 40);

    double got = FN(mixed_fn, c)(-5, 0.25f, 1e10, -7000000000LL, &m, 12, 4000000000u, 1ull << 40);
    ok(got == want, "d(ifdlpzIL): the trampoline returns the handler's double (%.17g == %.17g)", got, want);
    ok(m.i == -5 && m.f == 0.25f && m.d == 1e10 && m.l == -7000000000LL && m.p == &m && m.z == 12 &&
           m.I == 4000000000u && m.L == 1ull << 40,
       "d(ifdlpzIL): the handler saw each of the 8 arguments as its own type");

    /* The same call through flux_call, on the trampoline and on a C function. */
    int32_t i = -5;
    float f = 0.25f;
    double d = 1e10;
    int64_t l = -7000000000LL;
    void *p = &m;
    size_t z = 12;
    uint32_t I = 4000000000u;
    uint64_t L = 1ull << 40;
    void *args[] = {&i, &f, &d, &l, &p, &z, &I, &L};
    double r1 = 0, r2 = 0;
    EXPECT_OK(flux_call(flux_closure_code(c), "d(ifdlpzIL)", &r1, args));
    ok(r1 == want, "flux_call through the trampoline returns %.17g", r1);
    EXPECT_OK(flux_call((void *)(uintptr_t)mixed_native, "d(ifdlpzIL)", &r2, args));
    ok(r2 == want, "flux_call of the C function returns %.17g", r2);
    EXPECT_OK(flux_closure_destroy(c));
}

/* 16 arguments (FLUX_SIGNATURE_MAX_ARGS): most of them on the stack. */
static void sum16_l(void *userdata, void *ret, void **args)
{
    (void)userdata;
    int64_t sum = 0;
    for (int k = 0; k < 16; k++)
        sum += *(int64_t *)args[k] * (k + 1);
    *(int64_t *)ret = sum;
}

static void sum16_fd(void *userdata, void *ret, void **args)
{
    (void)userdata;
    double sum = 0;
    for (int k = 0; k < 16; k++)
        sum += (k % 2 ? *(double *)args[k] : (double)*(float *)args[k]) * (k + 1);
    *(double *)ret = sum;
}

typedef int64_t (*l16_fn)(int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                          int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t);
typedef double (*fd16_fn)(float, double, float, double, float, double, float, double,
                          float, double, float, double, float, double, float, double);

static void test_maximal_signatures(void)
{
    is_int(FLUX_SIGNATURE_MAX_ARGS, 16, "FLUX_SIGNATURE_MAX_ARGS is 16");

    flux_closure *c = make_closure("l(llllllllllllllll)", sum16_l, NULL, NULL);
    int64_t want = 0;
    for (int k = 0; k < 16; k++)
        want += (int64_t)(k * 1000003 - 5) * (k + 1);
    int64_t got = FN(l16_fn, c)(-5, 999998, 2000001, 3000004, 4000007, 5000010, 6000013, 7000016,
                                8000019, 9000022, 10000025, 11000028, 12000031, 13000034,
                                14000037, 15000040);
    is_int(got, want, "l(16 x l): all 16 integer arguments arrive in order");

    int64_t vals[16];
    void *args[16];
    for (int k = 0; k < 16; k++) {
        vals[k] = (int64_t)(k * 1000003 - 5);
        args[k] = &vals[k];
    }
    int64_t viacall = 0;
    EXPECT_OK(flux_call(flux_closure_code(c), "l(llllllllllllllll)", &viacall, args));
    is_int(viacall, want, "flux_call with 16 arguments");
    EXPECT_OK(flux_closure_destroy(c));

    c = make_closure("d(fdfdfdfdfdfdfdfd)", sum16_fd, NULL, NULL);
    double dwant = 0;
    for (int k = 0; k < 16; k++)
        dwant += (k + 0.5) * (k + 1);
    double dgot = FN(fd16_fn, c)(0.5f, 1.5, 2.5f, 3.5, 4.5f, 5.5, 6.5f, 7.5, 8.5f, 9.5, 10.5f, 11.5,
                                 12.5f, 13.5, 14.5f, 15.5);
    ok(dgot == dwant, "d(16 x f/d): floating arguments past the 8 registers arrive (%g == %g)", dgot, dwant);
    EXPECT_OK(flux_closure_destroy(c));
}

/* ---- flux_call on plain C functions, every letter ---------------------------- */

static int32_t neg_i(int32_t x) { return -x; }
static uint32_t not_I(uint32_t x) { return ~x; }
static int64_t neg_l(int64_t x) { return -x; }
static uint64_t not_L(uint64_t x) { return ~x; }
static size_t half_z(size_t x) { return x / 2; }
static float half_f(float x) { return x / 2; }
static double half_d(double x) { return x / 2; }
static void *next_p(void *x) { return (char *)x + 1; }
static int void_calls;
static void bump_v(void) { void_calls++; }

static void test_flux_call_each_letter(void)
{
    int32_t i = 123456, ri = 0;
    void *ai[] = {&i};
    EXPECT_OK(flux_call((void *)(uintptr_t)neg_i, "i(i)", &ri, ai));
    is_int(ri, -123456, "flux_call i(i): negative int32 narrowed from ffi_arg");

    uint32_t I = 5, rI = 0;
    void *aI[] = {&I};
    EXPECT_OK(flux_call((void *)(uintptr_t)not_I, "I(I)", &rI, aI));
    is_uint(rI, ~5u, "flux_call I(I)");

    int64_t l = INT64_MAX, rl = 0;
    void *al[] = {&l};
    EXPECT_OK(flux_call((void *)(uintptr_t)neg_l, "l(l)", &rl, al));
    is_int(rl, -INT64_MAX, "flux_call l(l)");

    uint64_t L = 0, rL = 0;
    void *aL[] = {&L};
    EXPECT_OK(flux_call((void *)(uintptr_t)not_L, "L(L)", &rL, aL));
    is_uint(rL, UINT64_MAX, "flux_call L(L)");

    size_t z = SIZE_MAX, rz = 0;
    void *az[] = {&z};
    EXPECT_OK(flux_call((void *)(uintptr_t)half_z, "z(z)", &rz, az));
    is_uint(rz, SIZE_MAX / 2, "flux_call z(z)");

    float f = 3.0f, rf = 0;
    void *af[] = {&f};
    EXPECT_OK(flux_call((void *)(uintptr_t)half_f, "f(f)", &rf, af));
    ok(rf == 1.5f, "flux_call f(f)");

    double d = 3.0, rd = 0;
    void *ad[] = {&d};
    EXPECT_OK(flux_call((void *)(uintptr_t)half_d, "d(d)", &rd, ad));
    ok(rd == 1.5, "flux_call d(d)");

    char text[] = "ab";
    void *p = text, *rp = NULL;
    void *ap[] = {&p};
    EXPECT_OK(flux_call((void *)(uintptr_t)next_p, "p(p)", &rp, ap));
    is_ptr(rp, text + 1, "flux_call p(p)");

    void_calls = 0;
    EXPECT_OK(flux_call((void *)(uintptr_t)bump_v, "v()", NULL, NULL));
    is_int(void_calls, 1, "flux_call v() with ret and args NULL");

    /* ret is written as the natural type only: no byte past 4 for 'i'. */
    unsigned char buf[8];
    memset(buf, 0xAA, sizeof buf);
    EXPECT_OK(flux_call((void *)(uintptr_t)neg_i, "i(i)", buf, ai));
    int32_t narrowed;
    memcpy(&narrowed, buf, 4);
    ok(narrowed == -123456 && buf[4] == 0xAA && buf[7] == 0xAA,
       "flux_call i(i) writes exactly 4 bytes at ret");
    memset(buf, 0xAA, sizeof buf);
    EXPECT_OK(flux_call((void *)(uintptr_t)half_f, "f(f)", buf, af));
    ok(buf[4] == 0xAA && buf[7] == 0xAA, "flux_call f(f) writes exactly 4 bytes at ret");

    /* ret NULL discards the result */
    EXPECT_OK(flux_call((void *)(uintptr_t)neg_i, "i(i)", NULL, ai));

    /* "ignored for a 'v' return": a ret given anyway is not written. */
    memset(buf, 0xAA, sizeof buf);
    void_calls = 0;
    EXPECT_OK(flux_call((void *)(uintptr_t)bump_v, "v()", buf, NULL));
    is_int(void_calls, 1, "flux_call v() with a ret: the function ran");
    unsigned char untouched[8];
    memset(untouched, 0xAA, sizeof untouched);
    ok(memcmp(buf, untouched, sizeof buf) == 0, "flux_call v() leaves ret as it was");
}

/* ---- many closures, one handler --------------------------------------------- */

typedef struct numbered {
    int index;
    int calls;
    int destroyed;
} numbered;

static void numbered_handler(void *userdata, void *ret, void **args)
{
    numbered *n = (numbered *)userdata;
    n->calls++;
    *(int32_t *)ret = n->index * 1000 + *(int32_t *)args[0];
}

static void numbered_destroy(void *userdata)
{
    ((numbered *)userdata)->destroyed++;
}

static void test_thousand_closures_one_handler(void)
{
    enum { N = 1000 };
    static numbered n[N];
    static flux_closure *c[N];
    int failures = 0;
    for (int k = 0; k < N; k++) {
        n[k].index = k;
        n[k].calls = 0;
        n[k].destroyed = 0;
        c[k] = NULL;
        failures += flux_closure_create("i(i)", numbered_handler, &n[k], numbered_destroy, &c[k]) != FLUX_OK;
    }
    is_int(failures, 0, "%d closures on one handler created", N);

    int distinct = 1;
    for (int k = 1; k < N && distinct; k++)
        distinct = flux_closure_code(c[k]) != flux_closure_code(c[k - 1]) && c[k] != c[k - 1];
    ok(distinct, "each has its own handle and code address");

    int wrong = 0;
    for (int round = 0; round < 3; round++)
        for (int k = N - 1; k >= 0; k--)
            wrong += FN(int32_t (*)(int32_t), c[k])(round) != k * 1000 + round;
    is_int(wrong, 0, "each trampoline's calls saw its own userdata (3 rounds, in reverse)");
    int calls_ok = 1;
    for (int k = 0; k < N; k++)
        calls_ok &= n[k].calls == 3;
    ok(calls_ok, "every userdata got exactly its 3 calls");

    int destroy_ok = 1;
    for (int k = 0; k < N; k++) {
        failures += flux_closure_destroy(c[k]) != FLUX_OK;
        destroy_ok &= n[k].destroyed == 1;
        if (k + 1 < N)
            destroy_ok &= n[k + 1].destroyed == 0;
    }
    is_int(failures, 0, "all %d destroyed", N);
    ok(destroy_ok, "each destroy ran its own destroy(userdata) exactly once, at that moment");
}

/* ---- threads ---------------------------------------------------------------- */

static void atomic_add(void *userdata, void *ret, void **args)
{
    atomic_long *total = (atomic_long *)userdata;
    long add = (long)*(int64_t *)args[0];
    *(int64_t *)ret = atomic_fetch_add(total, add) + add;
}

typedef struct caller {
    flux_closure *closure;
    long calls;
    pthread_t thread;
} caller;

static void *call_many(void *arg)
{
    caller *c = (caller *)arg;
    int64_t (*fn)(int64_t) = FN(int64_t (*)(int64_t), c->closure);
    for (long k = 0; k < c->calls; k++)
        fn(1);
    return NULL;
}

static void test_called_from_threads(void)
{
    enum { THREADS = 4 };
    atomic_long total = 0;
    flux_closure *c = make_closure("l(l)", atomic_add, &total, NULL);
    caller callers[THREADS];
    long per = tap_scale(50000);
    for (int t = 0; t < THREADS; t++) {
        callers[t].closure = c;
        callers[t].calls = per;
        REQUIRE(pthread_create(&callers[t].thread, NULL, call_many, &callers[t]) == 0);
    }
    for (int t = 0; t < THREADS; t++)
        pthread_join(callers[t].thread, NULL);
    is_int(atomic_load(&total), per * THREADS, "one trampoline called from %d threads at once", THREADS);
    EXPECT_OK(flux_closure_destroy(c));
}

/* ---- trampolines as dispatcher callbacks --------------------------------------- */

typedef struct hosted {
    int id;
    flux_dispatcher *d;
    trace *log;
    const void *payload;
    void *context;
    int fail_with;              /* returned by the trampoline */
    flux_token wait_on;         /* flux_wait_for(d, &wait_on, 1) first, when not 0 */
    flux_status wait_status;
    int destroyed;
} hosted;

/* The generic entry of a "host": every registered callback is a trampoline
 * of this one handler, told apart by userdata. */
static void host_handler(void *userdata, void *ret, void **args)
{
    hosted *h = (hosted *)userdata;
    h->context = *(void **)args[0];
    h->payload = *(const void **)args[1];
    trace_push(h->log, h->id);
    if (h->wait_on != 0)
        h->wait_status = flux_wait_for(h->d, &h->wait_on, 1);
    *(int32_t *)ret = h->fail_with;
}

static void hosted_destroy(void *userdata)
{
    ((hosted *)userdata)->destroyed++;
}

static void test_trampolines_as_callbacks(void)
{
    flux_dispatcher *d = flux_dispatcher_create();
    REQUIRE(d != NULL);
    trace log = {0};
    enum { N = 3 };
    hosted h[N];
    flux_closure *c[N];
    flux_token t[N];
    for (int k = 0; k < N; k++) {
        memset(&h[k], 0, sizeof h[k]);
        h[k].id = k + 1;
        h[k].d = d;
        h[k].log = &log;
        h[k].wait_status = (flux_status)-1;
        h[k].context = &h[k];
        c[k] = make_closure("i(pp)", host_handler, &h[k], hosted_destroy);
        EXPECT_STATUS(flux_register(d, FN(flux_callback, c[k]), NULL, NULL, &t[k]), FLUX_OK);
    }

    static const char payload[] = "payload";
    EXPECT_OK(flux_dispatch(d, payload));
    is_trace(&log, INTS(1, 2, 3), "trampolines registered with context NULL run in registration order");
    is_ptr(h[0].payload, payload, "the handler got the payload as args[1]");
    is_ptr(h[0].context, NULL, "and the NULL context as args[0]");

    /* wait_for: the first one waits on the last. */
    log.n = 0;
    h[0].wait_on = t[2];
    EXPECT_OK(flux_dispatch(d, payload));
    is_trace(&log, INTS(1, 3, 2), "a trampoline's handler can flux_wait_for() another");
    is_int(h[0].wait_status, FLUX_OK, "its flux_wait_for() returned FLUX_OK");

    /* failure: the last one returns 7 while the first waits on it. */
    log.n = 0;
    h[2].fail_with = 7;
    EXPECT_STATUS(flux_dispatch(d, payload), FLUX_ERR_CALLBACK_FAILED);
    has_substr(flux_last_error(), "returned 7", "the message names the value the trampoline returned");
    has_number(flux_last_error(), t[2], "and the failing trampoline's token");
    is_trace(&log, INTS(1, 3), "the dispatch stopped: callback 2 never ran");
    is_int(h[0].wait_status, FLUX_ERR_CALLBACK_FAILED, "the waiting handler's flux_wait_for() reported the failure");

    /* the dispatcher is idle and usable again */
    log.n = 0;
    h[2].fail_with = 0;
    h[0].wait_on = 0;
    EXPECT_OK(flux_dispatch(d, payload));
    is_trace(&log, INTS(1, 2, 3), "the next dispatch runs all of them again");

    EXPECT_OK(flux_dispatcher_destroy(d));
    for (int k = 0; k < N; k++) {
        EXPECT_OK(flux_closure_destroy(c[k]));
        is_int(h[k].destroyed, 1, "closure %d: destroy(userdata) ran once", k + 1);
    }
}

/* The dispatcher can own the trampoline: context is the closure, destroy
 * destroys it, so unregistering (even from inside itself) frees everything. */
static void destroy_closure(void *closure)
{
    flux_closure_destroy((flux_closure *)closure);
}

typedef struct self_remover {
    flux_dispatcher *d;
    flux_token token;
    int calls;
    int destroyed;
    flux_status unregister_status;
} self_remover;

static void self_removing_handler(void *userdata, void *ret, void **args)
{
    self_remover *s = (self_remover *)userdata;
    (void)args;
    s->calls++;
    s->unregister_status = flux_unregister(s->d, s->token);
    *(int32_t *)ret = 0;
}

static void self_remover_destroy(void *userdata)
{
    ((self_remover *)userdata)->destroyed++;
}

static void do_nothing(void *userdata, void *ret, void **args)
{
    (void)userdata;
    (void)ret;
    (void)args;
}

static void test_dispatcher_owns_trampoline(void)
{
    flux_dispatcher *d = flux_dispatcher_create();
    REQUIRE(d != NULL);
    self_remover s = {d, 0, 0, 0, (flux_status)-1};
    flux_closure *c = make_closure("i(pp)", self_removing_handler, &s, self_remover_destroy);
    EXPECT_OK(flux_register(d, FN(flux_callback, c), c, destroy_closure, &s.token));
    EXPECT_OK(flux_dispatch(d, NULL));
    is_int(s.calls, 1, "the trampoline ran");
    is_int(s.unregister_status, FLUX_OK, "it unregistered itself from inside its handler");
    is_int(s.destroyed, 1, "after the dispatch, the registration's destroy destroyed the closure, once");
    EXPECT_OK(flux_dispatch(d, NULL));
    is_int(s.calls, 1, "it is not called again");

    /* and flux_dispatcher_destroy() frees a trampoline it still holds */
    self_remover s2 = {d, 0, 0, 0, (flux_status)-1};
    flux_closure *c2 = make_closure("i(pp)", do_nothing, &s2, self_remover_destroy);
    EXPECT_OK(flux_register(d, FN(flux_callback, c2), c2, destroy_closure, &s2.token));
    EXPECT_OK(flux_dispatcher_destroy(d));
    is_int(s2.destroyed, 1, "flux_dispatcher_destroy() destroyed the closure it owned, once");
}

/* ---- malformed signatures ------------------------------------------------------ */

static void never_called(void *userdata, void *ret, void **args)
{
    (void)ret;
    (void)args;
    ((counter *)userdata)->destroyed += 1000; /* fails the destroy count */
}

typedef struct bad_signature {
    const char *signature;
    int position;         /* named in the message as "position N" */
    const char *found;    /* must appear in the message */
} bad_signature;

static const bad_signature bad_signatures[] = {
    {"", 0, "empty"},
    {"(", 0, "found '('"},
    {"(p)", 0, "found '('"},
    {")", 0, "found ')'"},
    {"x(p)", 0, "found 'x'"},
    {" i(p)", 0, "found ' '"},
    {"i", 1, "found the end of the signature"},
    {"v", 1, "found the end of the signature"},
    {"ip", 1, "found 'p'"},
    {"ip)", 1, "found 'p'"},
    {"ii(p)", 1, "one return type letter, then the argument letters in parentheses"},
    {"vi(p)", 1, "one return type letter"},
    {"I (p)", 1, "found ' '"},
    {"i[p]", 1, "found '['"},
    {"i(", 2, "expected ')' at position 2, found the end of the signature"},
    {"i(p", 3, "expected ')' at position 3, found the end of the signature"},
    {"i(px", 3, "unknown type letter 'x' at position 3"},
    {"i(pq)", 3, "unknown type letter 'q' at position 3"},
    {"i(p p)", 3, "unexpected ' ' at position 3"},
    {"i(P)", 2, "unknown type letter 'P'"},
    {"i(\x01)", 2, "unexpected '\\x01' at position 2"},
    {"i(\xff)", 2, "unexpected '\\xFF' at position 2"},
    {"i(p\"", 3, "unexpected '\"' at position 3"},
    {"i(v)", 2, "'v' (void) at position 2 is only valid as the return type"},
    {"i(pv)", 3, "'v' (void) at position 3"},
    {"i(p)x", 4, "unexpected 'x' at position 4"},
    {"i(p))", 4, "unexpected ')' at position 4"},
    {"i(p) ", 4, "unexpected ' ' at position 4"},
    {"i()()", 3, "unexpected '(' at position 3"},
    {"v(ppppppppppppppppp)", 18, "at most 16"},
    {"d(ddddddddddddddddddddddddddddd)", 18, "argument 17"},
};

static void test_malformed_signatures(void)
{
    size_t n = sizeof bad_signatures / sizeof bad_signatures[0];
    for (size_t k = 0; k < n; k++) {
        const bad_signature *b = &bad_signatures[k];
        char position[32];
        snprintf(position, sizeof position, "position %d", b->position);

        counter cnt = {0};
        flux_closure *c = (flux_closure *)&cnt; /* must be overwritten with NULL */
        flux_status s = flux_closure_create(b->signature, never_called, &cnt, count_destroy, &c);
        char message[600];
        snprintf(message, sizeof message, "%s", flux_last_error());
        is_int(s, FLUX_ERR_INVALID_ARGUMENT, "flux_closure_create(\"%s\") -> FLUX_ERR_INVALID_ARGUMENT", b->signature);
        has_prefix(message, "flux_closure_create: signature \"", "  the message names the function and quotes the signature");
        has_substr(message, position, "  it names %s", position);
        has_substr(message, b->found, "  it says what was found: %s", b->found);
        is_ptr(c, NULL, "  *out is NULL");
        is_int(cnt.destroyed, 1, "  destroy(userdata) ran exactly once");

        int32_t arg = 0;
        void *args[] = {&arg, &arg, &arg, &arg, &arg, &arg, &arg, &arg,
                        &arg, &arg, &arg, &arg, &arg, &arg, &arg, &arg, &arg};
        void_calls = 0;
        s = flux_call((void *)(uintptr_t)bump_v, b->signature, NULL, args);
        snprintf(message, sizeof message, "%s", flux_last_error());
        is_int(s, FLUX_ERR_INVALID_ARGUMENT, "flux_call(\"%s\") -> FLUX_ERR_INVALID_ARGUMENT", b->signature);
        has_prefix(message, "flux_call: signature \"", "  the message names flux_call");
        has_substr(message, position, "  and %s", position);
        is_int(void_calls, 0, "  the function was not called");
    }

    /* The message from the issue, exactly. */
    counter cnt = {0};
    flux_closure *c = NULL;
    EXPECT_STATUS(flux_closure_create("i(p", never_called, &cnt, count_destroy, &c), FLUX_ERR_INVALID_ARGUMENT);
    is_str(flux_last_error(), "flux_closure_create: signature \"i(p\": expected ')' at position 3, found the end of the signature",
           "the whole message for \"i(p\"");
    EXPECT_STATUS(flux_call((void *)(uintptr_t)bump_v, "v(x)", NULL, NULL), FLUX_ERR_INVALID_ARGUMENT);
    is_str(flux_last_error(),
           "flux_call: signature \"v(x)\": unknown type letter 'x' at position 2 (expected one of v, i, I, l, L, z, f, d, p or ')')",
           "the whole message for \"v(x)\"");

    /* A long signature is quoted only in part. */
    char longsig[300];
    memset(longsig, 'p', sizeof longsig - 1);
    longsig[0] = 'v';
    longsig[1] = '(';
    longsig[sizeof longsig - 1] = '\0';
    EXPECT_STATUS(flux_call((void *)(uintptr_t)bump_v, longsig, NULL, NULL), FLUX_ERR_INVALID_ARGUMENT);
    ok(strlen(flux_last_error()) < 250, "a 299-byte signature is abbreviated in the message (%zu bytes)",
       strlen(flux_last_error()));
    has_substr(flux_last_error(), "...\"", "  with ...");

    /* The 16-argument limit is exact. */
    c = NULL;
    EXPECT_OK(flux_closure_create("v(pppppppppppppppp)", never_called, &cnt, count_destroy, &c));
    EXPECT_OK(flux_closure_destroy(c));
    is_int(cnt.destroyed, 2, "16 arguments are accepted");
}

/* ---- NULL arguments and ownership ------------------------------------------------ */

static void test_null_arguments(void)
{
    counter cnt = {0};
    flux_closure *c = (flux_closure *)&cnt;

    EXPECT_STATUS(flux_closure_create("i(pp)", NULL, &cnt, count_destroy, &c), FLUX_ERR_INVALID_ARGUMENT);
    is_str(flux_last_error(), "flux_closure_create: handler is NULL", "the message names the NULL handler");
    is_int(cnt.destroyed, 1, "destroy(userdata) ran once when the handler is NULL");
    is_ptr(c, NULL, "*out is NULL");

    EXPECT_STATUS(flux_closure_create("i(pp)", never_called, &cnt, count_destroy, NULL), FLUX_ERR_INVALID_ARGUMENT);
    is_str(flux_last_error(), "flux_closure_create: out is NULL", "the message names the NULL out");
    is_int(cnt.destroyed, 2, "destroy(userdata) ran once when out is NULL");

    c = (flux_closure *)&cnt;
    EXPECT_STATUS(flux_closure_create(NULL, never_called, &cnt, count_destroy, &c), FLUX_ERR_INVALID_ARGUMENT);
    is_str(flux_last_error(), "flux_closure_create: signature is NULL", "the message names the NULL signature");
    is_int(cnt.destroyed, 3, "destroy(userdata) ran once when the signature is NULL");
    is_ptr(c, NULL, "*out is NULL");

    c = (flux_closure *)&cnt;
    EXPECT_STATUS(flux_closure_create(NULL, NULL, NULL, NULL, &c), FLUX_ERR_INVALID_ARGUMENT);
    is_ptr(c, NULL, "everything NULL: an error, *out NULL, and no destroy to run");

    EXPECT_OK(flux_closure_destroy(NULL));
    is_ptr(flux_closure_code(NULL), NULL, "flux_closure_code(NULL) is NULL");

    int32_t x = 1;
    void *args[] = {&x};
    EXPECT_STATUS(flux_call(NULL, "i(i)", NULL, args), FLUX_ERR_INVALID_ARGUMENT);
    is_str(flux_last_error(), "flux_call: function is NULL", "flux_call names the NULL function");
    EXPECT_STATUS(flux_call((void *)(uintptr_t)neg_i, NULL, NULL, args), FLUX_ERR_INVALID_ARGUMENT);
    is_str(flux_last_error(), "flux_call: signature is NULL", "flux_call names the NULL signature");
    EXPECT_STATUS(flux_call((void *)(uintptr_t)neg_i, "i(i)", NULL, NULL), FLUX_ERR_INVALID_ARGUMENT);
    is_str(flux_last_error(), "flux_call: args is NULL but the signature has 1 argument",
           "flux_call rejects NULL args when there are arguments");
}

static void test_destroy_exactly_once(void)
{
    counter cnt = {0};
    flux_closure *c = make_closure("v()", never_called, &cnt, count_destroy);
    is_int(cnt.destroyed, 0, "creating does not run destroy");
    EXPECT_OK(flux_closure_destroy(c));
    is_int(cnt.destroyed, 1, "flux_closure_destroy runs destroy(userdata) once");

    /* no destroy function: nothing to run, still freed (valgrind checks) */
    c = make_closure("v()", never_called, &cnt, NULL);
    EXPECT_OK(flux_closure_destroy(c));
    is_int(cnt.destroyed, 1, "a closure without destroy leaves userdata alone");

    /* NULL userdata is passed to destroy as NULL */
    c = make_closure("v()", never_called, NULL, NULL);
    EXPECT_OK(flux_closure_destroy(c));
}

/* The debugging aid of flux_closure_destroy(): memory that does not carry
 * a live closure's tag is refused, nothing done. (Only memory the test owns
 * is passed: a second destroy of a real closure would read freed memory.) */
static void test_not_a_live_closure_is_refused(void)
{
    _Alignas(16) unsigned char fake[256];
    memset(fake, 0, sizeof fake);
    flux_closure *c = (flux_closure *)fake;
    EXPECT_STATUS(flux_closure_destroy(c), FLUX_ERR_INVALID_ARGUMENT);
    has_substr(flux_last_error(), "flux_closure_destroy: not a live closure", "the message says why");
    is_ptr(flux_closure_code(c), NULL, "flux_closure_code() of it is NULL");
    unsigned char zero[sizeof fake] = {0};
    ok(memcmp(fake, zero, sizeof fake) == 0, "and nothing was written to it");
}

/* flux_last_error() stays per thread and a success leaves it alone. */
static void test_success_keeps_last_error(void)
{
    EXPECT_STATUS(flux_call(NULL, "v()", NULL, NULL), FLUX_ERR_INVALID_ARGUMENT);
    int calls = 0;
    flux_closure *c = make_closure("i(i)", echo_i, &calls, NULL);
    int32_t a = 1, r = 0;
    void *args[] = {&a};
    EXPECT_OK(flux_call(flux_closure_code(c), "i(i)", &r, args));
    EXPECT_OK(flux_closure_destroy(c));
    is_str(flux_last_error(), "flux_call: function is NULL", "successful calls leave flux_last_error() unchanged");
}

int main(void)
{
    tap_init();
    RUN(test_each_letter_round_trips);
    RUN(test_return_slot_is_zeroed);
    RUN(test_return_slot_is_zeroed_before_every_call);
    RUN(test_handler_may_fill_the_slot);
    RUN(test_void_return);
    RUN(test_mixed_signature);
    RUN(test_maximal_signatures);
    RUN(test_flux_call_each_letter);
    RUN(test_thousand_closures_one_handler);
    RUN(test_called_from_threads);
    RUN(test_trampolines_as_callbacks);
    RUN(test_dispatcher_owns_trampoline);
    RUN(test_malformed_signatures);
    RUN(test_null_arguments);
    RUN(test_destroy_exactly_once);
    RUN(test_not_a_live_closure_is_refused);
    RUN(test_success_keeps_last_error);
    return tap_done();
}
