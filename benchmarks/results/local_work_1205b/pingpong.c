// Two processes bounce a counter through one shared cache line (and, separately, copy 64 KiB through
// shared memory); prints, every 0.5 s, the median round-trip in ns and the copy bandwidth, for 60 s.
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/wait.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
static int cmp(const void* a, const void* b) { double x = *(double*)a, y = *(double*)b; return x < y ? -1 : x > y; }
int main(int argc, char** argv) {
  double secs = argc > 1 ? atof(argv[1]) : 60;
  volatile uint64_t* sh = mmap(NULL, 1 << 20, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  volatile uint64_t* ping = sh; volatile uint64_t* pong = sh + 16; volatile uint64_t* stop = sh + 32;
  if (fork() == 0) {
    uint64_t seen = 0;
    while (!*stop) { uint64_t v = *ping; if (v != seen) { seen = v; *pong = v; } else __builtin_ia32_pause(); }
    _exit(0);
  }
  static char src[65536], dst[65536]; memset(src, 1, sizeof src);
  double t0 = now();
  enum { K = 2000 };
  static double rtt[K];
  uint64_t v = 0;
  while (now() - t0 < secs) {
    double w = now();
    for (int i = 0; i < K; ++i) {
      double a = now(); *ping = ++v; while (*pong != v) __builtin_ia32_pause(); rtt[i] = now() - a;
    }
    qsort(rtt, K, sizeof(double), cmp);
    double c = now(); for (int i = 0; i < 200; ++i) { src[i] = (char)i; memcpy(dst, src, sizeof src); __asm__ volatile("" : : "r"(dst) : "memory"); }
    double bw = 200.0 * sizeof src / (now() - c) / 1e9;
    printf("%6.2f s  rtt median %6.0f ns  p90 %6.0f ns  memcpy %5.1f GB/s\n", w - t0, rtt[K / 2] * 1e9, rtt[K * 9 / 10] * 1e9, bw);
    fflush(stdout);
    while (now() - w < 0.5) usleep(1000);
  }
  *stop = 1; wait(NULL);
  return 0;
}
