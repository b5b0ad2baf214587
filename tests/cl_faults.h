/* Fault injection for the OpenCL calls flashcl makes, for test_faults. That program defines
 * these OpenCL entry points itself, so flashcl, linked statically into it, calls them; each
 * forwards to the ICD loader's unless it is the call chosen to fail, which returns the error
 * a driver would give instead. They also count the OpenCL objects alive, so a test can see
 * that every failure path releases what it made. Single-threaded use only. */
#ifndef FLASHCL_TEST_CL_FAULTS_H
#define FLASHCL_TEST_CL_FAULTS_H

#include "flashcl.h"

/* From now on, the n-th call that can fail does (n >= 1); 0 fails none. Restarts the count. */
void faults_arm(long n);
/* The call made to fail since faults_arm (NULL if none was), and the error it returned. */
const char *faults_failed(void);
cl_int faults_failed_error(void);
/* OpenCL objects (contexts, queues, programs, kernels, buffers, events, devices) created or
 * retained and not yet released, through these entry points. */
long faults_live_objects(void);

#endif
