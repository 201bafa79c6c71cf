/*
 * fuzz-signature.c -- libFuzzer target: the signature parser of
 * flux_closure_create() and flux_call(), against a reference parser of the
 * grammar in flux.h ("R(A...)", at most FLUX_SIGNATURE_MAX_ARGS arguments).
 * The input, up to its first NUL, is the signature. A well-formed one must
 * make a working trampoline (called through flux_call() with zeroed
 * arguments, returning what its handler wrote); a malformed one must be
 * refused by both functions with FLUX_ERR_INVALID_ARGUMENT, a message naming
 * a position, and userdata destroyed once. Anything else aborts.
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

/* The grammar, independently: return letter, '(', 0..16 argument letters, ')'. */
static int well_formed(const char *s)
{
    if (!(is_type(s[0]) || s[0] == 'v') || s[1] != '(')
        return -1;
    int n = 0;
    const char *p = s + 2;
    while (is_type(*p)) {
        p++;
        n++;
    }
    if (*p != ')' || p[1] != '\0' || n > FLUX_SIGNATURE_MAX_ARGS)
        return -1;
    return n;
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
    (void)args;
    CHECK(userdata == &destroyed);
    handled++;
    if (ret)
        memset(ret, 0x11, 1);  /* a small, valid value of every type */
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
        CHECK(strstr(flux_last_error(), "position") != NULL || strstr(flux_last_error(), "empty") != NULL);
        CHECK(flux_call((void *)on_destroy, signature, NULL, NULL) == FLUX_ERR_INVALID_ARGUMENT);
        return 0;
    }
    CHECK(st == FLUX_OK && closure != NULL && destroyed == 0);
    uint64_t values[FLUX_SIGNATURE_MAX_ARGS] = {0};
    void *argv[FLUX_SIGNATURE_MAX_ARGS + 1];
    for (int i = 0; i < args; i++)
        argv[i] = &values[i];
    uint64_t result = 0;
    CHECK(flux_call(flux_closure_code(closure), signature, &result, argv) == FLUX_OK);
    CHECK(handled == 1);
    if (signature[0] != 'v' && signature[0] != 'f' && signature[0] != 'd')
        CHECK((result & 0xff) == 0x11);
    CHECK(flux_closure_destroy(closure) == FLUX_OK && destroyed == 1);
    return 0;
}
