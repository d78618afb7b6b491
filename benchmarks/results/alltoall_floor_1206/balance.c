// Two processes, a 2-rank alltoall of 2 x len bytes per rank, timed from a shared start to both ranks done.
// mode 0 (static, as the engine does): each rank memmoves its own block, then process_vm_writev's its block
// for the peer into the peer's output. mode 1 (dynamic): each rank memmoves its own block, then both ranks
// claim chunk-sized pieces of the two cross blocks from one shared counter; a piece of my block for the
// peer is written (process_vm_writev), a piece of the peer's block for me is read (process_vm_readv).
// Prints the median wall per call and each rank's median busy time (its copies) and idle time (waiting for
// the other). Huge pages everywhere, buffers on 2 MiB boundaries.
// gcc -O2 -o balance balance.c && ./balance LEN_MIB MODE ITERS CHUNK_KIB
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>
#include <time.h>
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
static void *buf(size_t n){void*p=mmap(0,n+(2<<20),PROT_READ|PROT_WRITE,MAP_PRIVATE|MAP_ANONYMOUS,-1,0);
 p=(void*)(((unsigned long)p+(2<<20)-1)&~((2UL<<20)-1)); madvise(p,n,MADV_HUGEPAGE); memset(p,1,n); return p;}
static int cmp(const void*a,const void*b){double x=*(double*)a,y=*(double*)b;return x<y?-1:x>y;}
int main(int argc,char**argv){
 size_t len=(size_t)atol(argv[1])<<20; int mode=atoi(argv[2]); int iters=atoi(argv[3]); size_t chunk=(size_t)atol(argv[4])<<10;
 volatile long *ctl=mmap(0,4096,PROT_READ|PROT_WRITE,MAP_SHARED|MAP_ANONYMOUS,-1,0);
 int me = fork()==0 ? 1 : 0;
 char*in=buf(2*len),*out=buf(2*len);
 ctl[2*me]=getpid(); ctl[4+2*me]=(long)in; ctl[5+2*me]=(long)out; __atomic_store_n(&ctl[12+me],1,__ATOMIC_SEQ_CST);
 while(!__atomic_load_n(&ctl[12+1-me],__ATOMIC_SEQ_CST));
 pid_t peer=ctl[2*(1-me)]; char*fin=(char*)ctl[4+2*(1-me)],*fout=(char*)ctl[5+2*(1-me)];
 size_t per=(len+chunk-1)/chunk; long K=2*per; long base=0;
 double *wall=malloc(iters*sizeof(double)),*busy=malloc(iters*sizeof(double));
 volatile long *start=&ctl[16], *done=&ctl[24], *claim=&ctl[32];
 for(int i=0;i<iters;i++){
   __atomic_add_fetch(start,1,__ATOMIC_SEQ_CST); while(__atomic_load_n(start,__ATOMIC_SEQ_CST)<2*(i+1));
   double t0=now();
   memmove(out+me*len,in+me*len,len);
   if(mode==0){struct iovec l={in+(1-me)*len,len},f={fout+me*len,len};
     if(process_vm_writev(peer,&l,1,&f,1,0)!=(ssize_t)len){perror("w");return 1;}}
   else for(;;){
     long c=__atomic_load_n(claim,__ATOMIC_SEQ_CST);
     if(c>=base+K) break;
     if(!__atomic_compare_exchange_n(claim,&c,c+1,0,__ATOMIC_SEQ_CST,__ATOMIC_SEQ_CST)) continue;
     long k=c-base; int src=k<(long)per?0:1; size_t off=(size_t)(k%per)*chunk; size_t n=len-off<chunk?len-off:chunk;
     // block from rank src to rank 1-src: src's in[(1-src)*len + off] -> (1-src)'s out[src*len + off]
     if(src==me){struct iovec l={in+(1-me)*len+off,n},f={fout+me*len+off,n}; if(process_vm_writev(peer,&l,1,&f,1,0)!=(ssize_t)n){perror("w");return 1;}}
     else {struct iovec l={out+(1-me)*len+off,n},f={fin+me*len+off,n}; if(process_vm_readv(peer,&l,1,&f,1,0)!=(ssize_t)n){perror("r");return 1;}}
   }
   double t1=now();
   __atomic_add_fetch(done,1,__ATOMIC_SEQ_CST); while(__atomic_load_n(done,__ATOMIC_SEQ_CST)<2*(i+1));
   double t2=now(); base+=K;
   wall[i]=t2-t0; busy[i]=t1-t0;
 }
 qsort(wall,iters,sizeof(double),cmp); qsort(busy,iters,sizeof(double),cmp);
 if(me==1){usleep(20000);} else wait(0);
 printf("rank %d len %zu MiB mode %s chunk %zu KiB: wall median %.2f ms, busy median %.2f ms\n",me,len>>20,mode?"dynamic":"static",chunk>>10,wall[iters/2]*1e3,busy[iters/2]*1e3);
 fflush(stdout);
 return 0;}
