/*
 * check.h -- the native tests' one assertion: a failed CHECK prints where and what, counts, and
 * lets the test go on (so one run reports every failure); main returns failures != 0.
 */
#ifndef TICKGPU_TEST_CHECK_H
#define TICKGPU_TEST_CHECK_H

#include <stdio.h>

static int failures = 0;

#define CHECK(cond)                                                              \
    do {                                                                         \
        if (!(cond)) {                                                           \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
            failures++;                                                          \
        }                                                                        \
    } while (0)

#endif
