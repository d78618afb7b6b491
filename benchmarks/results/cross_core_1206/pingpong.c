// Cross-core costs between CPU 0 and CPU 1: a cache-line ping-pong round trip, and a 128 KiB buffer one core
// has just written copied out by the other (the shared-memory ring's pattern).
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#define N (128 * 1024)
static _Alignas(64) atomic_long flag;
static _Alignas(64) char buf[N];
static char src[N]; char dst[N];
static int iters = 20000, rounds = 400;
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
static void pin(int c) { cpu_set_t s; CPU_ZERO(&s); CPU_SET(c, &s); pthread_setaffinity_np(pthread_self(), sizeof s, &s); }
static void* other(void* arg) {
  pin(1);
  for (long i = 0; i < iters; ++i) { while (atomic_load(&flag) != 2 * i + 1); atomic_store(&flag, 2 * i + 2); }
  for (long r = 0; r < rounds; ++r) { while (atomic_load(&flag) != -(2 * r + 1)); memcpy(dst, buf, N); atomic_store(&flag, -(2 * r + 2)); }
  return 0;
}
int main(void) {
  pthread_t t; pin(0); memset(src, 1, N); atomic_store(&flag, 0);
  pthread_create(&t, 0, other, 0);
  double t0 = now();
  for (long i = 0; i < iters; ++i) { atomic_store(&flag, 2 * i + 1); while (atomic_load(&flag) != 2 * i + 2); }
  double pp = (now() - t0) / iters * 1e9;
  double copy = 0;
  for (long r = 0; r < rounds; ++r) {
    memcpy(buf, src, N);  // the lines are now modified in CPU 0's cache
    double a = now(); atomic_store(&flag, -(2 * r + 1)); while (atomic_load(&flag) != -(2 * r + 2)); copy += now() - a;
  }
  pthread_join(t, 0);
  printf("chk %d ", dst[N - 1]); printf("pingpong_ns %.0f  remote_copy_128K_us %.1f\n", pp, copy / rounds * 1e6);
  return 0;
}
