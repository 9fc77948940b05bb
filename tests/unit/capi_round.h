/* capi_round.c's one function, for capi_test.cpp: C linkage either way. */
#ifndef WSYNC_TESTS_CAPI_ROUND_H
#define WSYNC_TESTS_CAPI_ROUND_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Runs one round on `bus` through the C API; 0 when it committed and the worker holds the bytes, else 1 with why in
 * `error`. */
int wsync_test_c_round(const char* bus, char* error, size_t error_size);

#ifdef __cplusplus
}
#endif

#endif /* WSYNC_TESTS_CAPI_ROUND_H */
