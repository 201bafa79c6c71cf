/*
 * fuzz-signature.c -- libFuzzer target: the signature parser of
 * flux_closure_create() and flux_call(), against a reference parser of the
 * grammar in flux.h ("R(A...)", at most FLUX_SIGNATURE_MAX_ARGS arguments).
 * The input, up to its first NUL, is the signature. A well-formed one must
 * make a working trampoline (called through flux_call() with a distinct
 * value per argument, which its handler must receive, returning the value
 * of the return type its handler wrote); a malformed one must be refused by
 * both functions with FLUX_ERR_INVALID_ARGUMENT, a message naming the
 * position where the grammar first breaks, and userdata destroyed once.
 * Anything else aborts.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <flux.h>

#define CHECK(cond)                                                                    \
    do {                                                                               \
        if (!(cond)) {                                                                 \
            fprintf(stderr, "fuzz-signature: %s:%d: %s\n", __FILE__, __LINE__, #cond); \
            abort();                                                                   \
        }                                                                              \
    } while (0)

static bool is_type(char c) { return c && strchr("ilLIzfdp", c) != NULL; }

/* The grammar, independently: return letter, '(', 0..16 argument letters,
 * ')'. Returns the number of arguments, or -1 - the position where the
 * signature first stops being a prefix of a well-formed one. */
static int well_formed(const char *s)
{
    if (!(is_type(s[0]) || s[0] == 'v'))
        return -1;
    if (s[1] != '(')
        return -1 - 1;
    int n = 0;
    const char *p = s + 2;
    while (is_type(*p) && n < FLUX_SIGNATURE_MAX_ARGS) {
        p++;
        n++;
    }
    if (*p != ')')
        return -1 - (int)(p - s);
    if (p[1] != '\0')
        return -1 - (int)(p + 1 - s);
    return n;
}

/* The message names the position: "at position P" (the quoted signature
 * may hold such words too, so any occurrence will do). */
static bool names_position(const char *message, int position)
{
    char want[32];
    snprintf(want, sizeof want, "at position %d", position);
    size_t len = strlen(want);
    for (const char *m = strstr(message, want); m; m = strstr(m + 1, want))
        if (m[len] < '0' || m[len] > '9')
            return true;
    return false;
}

/* Argument i's value, and the return value, of each type. */
typedef union value {
    int32_t i;
    uint32_t I;
    int64_t l;
    uint64_t L;
    size_t z;
    float f;
    double d;
    void *p;
} value;

static const char *current; /* the signature being called */

static value make(char type, int i)
{
    value v;
    memset(&v, 0, sizeof v);
    switch (type) {
    case 'i': v.i = -1000 - i; break;
    case 'I': v.I = 0xfffff000u + (uint32_t)i; break;
    case 'l': v.l = -0x100000000ll * (i + 1) - i; break;
    case 'L': v.L = 0xf000000000000000ull + (uint64_t)i; break;
    case 'z': v.z = (size_t)-2 - (size_t)i; break;
    case 'f': v.f = 0.5f + (float)i; break;
    case 'd': v.d = -0.25 - (double)i; break;
    case 'p': v.p = (char *)&current + i; break;
    }
    return v;
}

static bool same(char type, const void *a, const void *b)
{
    const value *x = a, *y = b;
    switch (type) {
    case 'i': return x->i == y->i;
    case 'I': return x->I == y->I;
    case 'l': return x->l == y->l;
    case 'L': return x->L == y->L;
    case 'z': return x->z == y->z;
    case 'f': return x->f == y->f;
    case 'd': return x->d == y->d;
    case 'p': return x->p == y->p;
    }
    return false;
}

static int destroyed;
static int handled;

static void on_destroy(void *userdata)
{
    CHECK(userdata == &destroyed);
    destroyed++;
}

static void handler(void *userdata, void *ret, void **args)
{
    CHECK(userdata == &destroyed);
    handled++;
    for (int i = 0; current[2 + i] != ')'; i++) {
        value want = make(current[2 + i], i);
        CHECK(same(current[2 + i], args[i], &want));
    }
    CHECK((current[0] == 'v') == (ret == NULL));
    if (ret) {
        value v = make(current[0], 99);
        memcpy(ret, &v, FLUX_CLOSURE_RET_SIZE);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char signature[64];
    size_t n = size < sizeof signature - 1 ? size : sizeof signature - 1;
    memcpy(signature, data, n);
    signature[n] = '\0';  /* the input up to its first NUL */
    int args = well_formed(signature);

    destroyed = handled = 0;
    flux_closure *closure = (flux_closure *)&closure;
    flux_status st = flux_closure_create(signature, handler, &destroyed, on_destroy, &closure);
    if (args < 0) {
        CHECK(st == FLUX_ERR_INVALID_ARGUMENT);
        CHECK(closure == NULL && destroyed == 1);
        CHECK(names_position(flux_last_error(), -1 - args));
        CHECK(flux_call((void *)on_destroy, signature, NULL, NULL) == FLUX_ERR_INVALID_ARGUMENT);
        CHECK(names_position(flux_last_error(), -1 - args));
        return 0;
    }
    CHECK(st == FLUX_OK && closure != NULL && destroyed == 0);
    value values[FLUX_SIGNATURE_MAX_ARGS];
    void *argv[FLUX_SIGNATURE_MAX_ARGS + 1];
    for (int i = 0; i < args; i++) {
        values[i] = make(signature[2 + i], i);
        argv[i] = &values[i];
    }
    value result;
    memset(&result, 0xab, sizeof result); /* flux_call() writes the natural size only */
    current = signature;
    CHECK(flux_call(flux_closure_code(closure), signature, signature[0] == 'v' ? NULL : &result, argv) == FLUX_OK);
    CHECK(handled == 1);
    if (signature[0] != 'v') {
        value want = make(signature[0], 99);
        CHECK(same(signature[0], &result, &want));
        size_t size = strchr("iIf", signature[0]) ? 4 : strchr("lLd", signature[0]) ? 8 : sizeof(void *);
        for (size_t i = size; i < sizeof result; i++)
            CHECK(((unsigned char *)&result)[i] == 0xab);
    }
    CHECK(flux_closure_destroy(closure) == FLUX_OK && destroyed == 1);
    return 0;
}
