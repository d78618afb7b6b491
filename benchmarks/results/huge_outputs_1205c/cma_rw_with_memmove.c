// Two processes at once, each: a local memmove (glibc, or non-temporal stores when nt=1) of len bytes plus a
// cross-memory copy of len bytes with the peer: cma=1 process_vm_writev into its output, cma=2
// process_vm_readv from its input (one rank of a 2-rank alltoall). Huge pages everywhere, unless the optional
// sixth argument small_in=1 puts the inputs on 4 KiB pages (copy_phase_1206/reads_vs_writes.txt).
// gcc -O2 -o cma_rw cma_rw_with_memmove.c && ./cma_rw 8 {0|1} {1|2} 200 2 [{0|1}]
#define _GNU_SOURCE
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>
#include <time.h>
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
static void *buf(size_t n,int huge){void*p=mmap(0,n+(2<<20),PROT_READ|PROT_WRITE,MAP_PRIVATE|MAP_ANONYMOUS,-1,0);
 p=(void*)(((unsigned long)p+(2<<20)-1)&~((2UL<<20)-1)); madvise(p,n,huge?MADV_HUGEPAGE:MADV_NOHUGEPAGE); memset(p,1,n); return p;}
__attribute__((target("avx2"))) static void ntcopy(void*d,const void*s,size_t n){
  __m256i*D=d; const __m256i*S=s; for(size_t i=0;i<n/32;i+=4){__m256i a=_mm256_loadu_si256(S+i),b=_mm256_loadu_si256(S+i+1),c=_mm256_loadu_si256(S+i+2),e=_mm256_loadu_si256(S+i+3);
  _mm256_stream_si256(D+i,a);_mm256_stream_si256(D+i+1,b);_mm256_stream_si256(D+i+2,c);_mm256_stream_si256(D+i+3,e);} _mm_sfence();}
int main(int argc,char**argv){
 size_t len=(size_t)atol(argv[1])<<20; int nt=atoi(argv[2]); int cma=atoi(argv[3]); int iters=atoi(argv[4]); int nproc=atoi(argv[5]);
 volatile long *ctl=mmap(0,4096,PROT_READ|PROT_WRITE,MAP_SHARED|MAP_ANONYMOUS,-1,0);
 int me = (nproc==2 && fork()==0) ? 1 : 0;
 int small_in=(argc>6)?atoi(argv[6]):0; char*in=buf(2*len,!small_in),*out=buf(2*len,1);
 ctl[2*me]=getpid(); ctl[2*me+1]=(long)(cma==2?in:out); ctl[8+me]=1;
 if(nproc==2) while(!ctl[8+1-me]);
 pid_t peer=ctl[2*(1-me)]; char*far=(char*)ctl[2*(1-me)+1];
 double tot=0; double ts[1000];
 for(int i=0;i<iters;i++){
   if(nproc==2){__atomic_add_fetch(&ctl[16],1,__ATOMIC_SEQ_CST); while(ctl[16]<2*(i+1));}
   double t0=now();
   if(nt) ntcopy(out+me*len,in+me*len,len); else memmove(out+me*len,in+me*len,len);
   if(cma==1){struct iovec l={in+(1-me)*len,len},f={far+me*len,len}; if(process_vm_writev(peer,&l,1,&f,1,0)!=(ssize_t)len){perror("w");return 1;}} if(cma==2){struct iovec l={out+(1-me)*len,len},f={far+(1-me)*len,len}; if(process_vm_readv(peer,&l,1,&f,1,0)!=(ssize_t)len){perror("r");return 1;}}
   ts[i]=now()-t0;
 }
 // median
 for(int i=0;i<iters;i++)for(int j=i+1;j<iters;j++)if(ts[j]<ts[i]){double x=ts[i];ts[i]=ts[j];ts[j]=x;}
 if(me==0) printf("len %zu MiB nt=%d cma=%d nproc=%d: median %.3f ms\n",len>>20,nt,cma,nproc,ts[iters/2]*1e3);
 if(!me && nproc==2) wait(0);
 return 0;}
