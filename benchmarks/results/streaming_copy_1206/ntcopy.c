// Two processes copy at once (as the ranks of a 2-rank alltoall do): each copies a block of B bytes from
// its source to one of K destinations in turn (so the destination is not in cache), by one of three
// methods, interleaved round by round: memcpy (glibc: rep movsb below its 240 MiB non-temporal threshold
// on this host), AVX2 non-temporal stores, AVX-512 non-temporal stores. Buffers on 2 MiB huge pages.
#define _GNU_SOURCE
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <pthread.h>

static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
static void* huge(size_t n) {
  void* p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  madvise(p, n, MADV_HUGEPAGE); memset(p, 1, n); return p;
}
__attribute__((target("avx2"))) static void nt2(char* d, const char* s, size_t n) {
  for (size_t i = 0; i < n; i += 128) {
    __m256i a = _mm256_loadu_si256((const __m256i*)(s + i)), b = _mm256_loadu_si256((const __m256i*)(s + i + 32));
    __m256i c = _mm256_loadu_si256((const __m256i*)(s + i + 64)), e = _mm256_loadu_si256((const __m256i*)(s + i + 96));
    _mm256_stream_si256((__m256i*)(d + i), a); _mm256_stream_si256((__m256i*)(d + i + 32), b);
    _mm256_stream_si256((__m256i*)(d + i + 64), c); _mm256_stream_si256((__m256i*)(d + i + 96), e);
  }
  _mm_sfence();
}
static void nt1(char* d, const char* s, size_t n) {
  for (size_t i = 0; i < n; i += 64) {
    __m128i a = _mm_loadu_si128((const __m128i*)(s + i)), b = _mm_loadu_si128((const __m128i*)(s + i + 16));
    __m128i c = _mm_loadu_si128((const __m128i*)(s + i + 32)), e = _mm_loadu_si128((const __m128i*)(s + i + 48));
    _mm_stream_si128((__m128i*)(d + i), a); _mm_stream_si128((__m128i*)(d + i + 16), b);
    _mm_stream_si128((__m128i*)(d + i + 32), c); _mm_stream_si128((__m128i*)(d + i + 48), e);
  }
  _mm_sfence();
}
__attribute__((target("avx512f"))) static void nt5(char* d, const char* s, size_t n) {
  for (size_t i = 0; i < n; i += 256) {
    __m512i a = _mm512_loadu_si512(s + i), b = _mm512_loadu_si512(s + i + 64);
    __m512i c = _mm512_loadu_si512(s + i + 128), e = _mm512_loadu_si512(s + i + 192);
    _mm512_stream_si512((__m512i*)(d + i), a); _mm512_stream_si512((__m512i*)(d + i + 64), b);
    _mm512_stream_si512((__m512i*)(d + i + 128), c); _mm512_stream_si512((__m512i*)(d + i + 192), e);
  }
  _mm_sfence();
}
int main(int argc, char** argv) {
  size_t B = (size_t)atol(argv[1]) << 20; int K = 3, rounds = argc > 2 ? atoi(argv[2]) : 12;
  pthread_barrierattr_t at; pthread_barrierattr_init(&at); pthread_barrierattr_setpshared(&at, PTHREAD_PROCESS_SHARED);
  pthread_barrier_t* bar = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  pthread_barrier_init(bar, &at, 2);
  int child = fork() == 0;
  char* src = huge(B); char* dst[3]; for (int k = 0; k < K; ++k) dst[k] = huge(B);
  const char* names[4] = {"memcpy", "nt-avx2", "nt-avx512", "nt-sse2"};
  double t[4][64]; int it = 0;
  for (int r = 0; r < rounds; ++r) {
    for (int m0 = 0; m0 < 4; ++m0) {
      int m = (m0 + r) % 4;
      double best = 0;
      for (int rep = 0; rep < 3; ++rep) {
        pthread_barrier_wait(bar);
        char* d = dst[it++ % K];
        double t0 = now();
        if (m == 0) memcpy(d, src, B); else if (m == 1) nt2(d, src, B); else if (m == 2) nt5(d, src, B); else nt1(d, src, B);
        double dt = now() - t0;
        best += dt / 3;
      }
      t[m][r] = best;
    }
  }
  if (!child) {
    for (int m = 0; m < 4; ++m) {
      double v[64]; memcpy(v, t[m], sizeof(double) * rounds);
      for (int i = 0; i < rounds; ++i) for (int j = i + 1; j < rounds; ++j) if (v[j] < v[i]) { double x = v[i]; v[i] = v[j]; v[j] = x; }
      double ratio[64];
      for (int i = 0; i < rounds; ++i) ratio[i] = t[0][i] / t[m][i];
      for (int i = 0; i < rounds; ++i) for (int j = i + 1; j < rounds; ++j) if (ratio[j] < ratio[i]) { double x = ratio[i]; ratio[i] = ratio[j]; ratio[j] = x; }
      printf("%zu MiB %-10s median %.3f ms (%.3f..%.3f)  memcpy/this median %.2f\n", B >> 20, names[m], v[rounds / 2] * 1e3,
             v[0] * 1e3, v[rounds - 1] * 1e3, ratio[rounds / 2]);
    }
    wait(NULL);
  }
  return 0;
}
