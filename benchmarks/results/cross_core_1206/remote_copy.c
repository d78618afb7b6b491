// A 128 KiB buffer that CPU 0 has just written, copied out by CPU 1 in several ways, interleaved round by
// round, with the cross-core round trip measured alongside: which copy suffers least when lines move
// slowly between the cores?
#define _GNU_SOURCE
#include <immintrin.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#define N (128 * 1024)
#define V 4
static _Alignas(64) atomic_long flag;
static _Alignas(4096) char buf[N];
static _Alignas(4096) char src[N];
_Alignas(4096) char dst[N];
static int rounds = 200;
static double spent[V];
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
static void pin(int c) { cpu_set_t s; CPU_ZERO(&s); CPU_SET(c, &s); pthread_setaffinity_np(pthread_self(), sizeof s, &s); }
__attribute__((target("avx2"))) static void copy_avx(char* d, const char* s, size_t n, int pf) {
  for (size_t i = 0; i < n; i += 128) {
    if (pf) _mm_prefetch(s + i + pf, _MM_HINT_T0);
    __m256i a = _mm256_loadu_si256((const __m256i*)(s + i)), b = _mm256_loadu_si256((const __m256i*)(s + i + 32));
    __m256i c = _mm256_loadu_si256((const __m256i*)(s + i + 64)), e = _mm256_loadu_si256((const __m256i*)(s + i + 96));
    _mm256_storeu_si256((__m256i*)(d + i), a); _mm256_storeu_si256((__m256i*)(d + i + 32), b);
    _mm256_storeu_si256((__m256i*)(d + i + 64), c); _mm256_storeu_si256((__m256i*)(d + i + 96), e);
  }
}
static void do_copy(int v) {
  if (v == 0) memcpy(dst, buf, N);
  else if (v == 1) copy_avx(dst, buf, N, 0);
  else if (v == 2) copy_avx(dst, buf, N, 1024);
  else copy_avx(dst, buf, N, 4096);
}
static void* other(void* arg) {
  pin(1);
  for (long i = 0; i < 20000; ++i) { while (atomic_load(&flag) != 2 * i + 1); atomic_store(&flag, 2 * i + 2); }
  for (long r = 0; r < rounds * V; ++r) {
    while (atomic_load(&flag) != -(2 * r + 1));
    double a = now(); do_copy((int)(r % V)); spent[r % V] += now() - a;
    atomic_store(&flag, -(2 * r + 2));
  }
  return 0;
}
int main(void) {
  pthread_t t; pin(0); memset(src, 1, N); atomic_store(&flag, 0);
  pthread_create(&t, 0, other, 0);
  double t0 = now();
  for (long i = 0; i < 20000; ++i) { atomic_store(&flag, 2 * i + 1); while (atomic_load(&flag) != 2 * i + 2); }
  double pp = (now() - t0) / 20000 * 1e9;
  for (long r = 0; r < rounds * V; ++r) {
    memcpy(buf, src, N);
    atomic_store(&flag, -(2 * r + 1)); while (atomic_load(&flag) != -(2 * r + 2));
  }
  pthread_join(t, 0);
  printf("chk %d pingpong_ns %4.0f  memcpy %5.1f  avx %5.1f  avx+pf1K %5.1f  avx+pf4K %5.1f us\n", dst[N - 1], pp,
         spent[0] / rounds * 1e6, spent[1] / rounds * 1e6, spent[2] / rounds * 1e6, spent[3] / rounds * 1e6);
  return 0;
}
