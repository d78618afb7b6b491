// Measured: order_floor.txt (2026-12-06).
// 2-rank alltoall copy floor, numpy-like inputs, huge-page outputs: the order and direction of the two copies.
// mode 1: memmove own block, then write the cross block (the engine); mode 4: read the cross block, then memmove
// own (Open MPI's two_procs + CMA); mode 5: write the cross block, then memmove own; mode 6: memmove own, then read.
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>
#include <time.h>
#define H (2UL<<20)
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
static char *outbuf(size_t n){char*p=mmap(0,n+H,PROT_READ|PROT_WRITE,MAP_PRIVATE|MAP_ANONYMOUS,-1,0);
 p=(char*)(((unsigned long)p+H-1)&~(H-1)); madvise(p,n,MADV_HUGEPAGE); memset(p,1,n); return p+16;}
static char *npbuf(size_t n){char*p=mmap(0,n+2*H,PROT_READ|PROT_WRITE,MAP_PRIVATE|MAP_ANONYMOUS,-1,0);
 p=(char*)((((unsigned long)p+H-1)&~(H-1))+H/2+16);
 char*a=(char*)(((unsigned long)p+4095)&~4095UL); madvise(a,p+n-a,MADV_HUGEPAGE); memset(p,1,n); return p;}
int main(int argc,char**argv){
 size_t len=(size_t)atol(argv[1])<<20; int iters=atoi(argv[2]); const char* modes=argv[3];
 volatile long *ctl=mmap(0,4096,PROT_READ|PROT_WRITE,MAP_SHARED|MAP_ANONYMOUS,-1,0);
 int me = fork()==0 ? 1 : 0;
 char*in=npbuf(2*len),*out=outbuf(2*len);
 ctl[4*me]=getpid(); ctl[4*me+1]=(long)in; ctl[4*me+2]=(long)out; ctl[8+me]=1;
 while(!ctl[8+1-me]);
 pid_t peer=ctl[4*(1-me)]; char*fin=(char*)ctl[4*(1-me)+1], *fout=(char*)ctl[4*(1-me)+2];
 int nm=strlen(modes); double ts[8][1000]; long bar=0;
 for(int i=0;i<iters;i++) for(int k=0;k<nm;k++){
   int mode=modes[(k+i)%nm]-'0';
   __atomic_add_fetch(&ctl[16],1,__ATOMIC_SEQ_CST); bar+=2; while(ctl[16]<bar);
   double t0=now();
   struct iovec wl={in+(1-me)*len,len}, wf={fout+me*len,len};      /* write my block for the peer */
   struct iovec rl={out+(1-me)*len,len}, rf={fin+me*len,len};      /* read the peer's block for me */
   if(mode==1){memmove(out+me*len,in+me*len,len); if(process_vm_writev(peer,&wl,1,&wf,1,0)!=(ssize_t)len)return 1;}
   if(mode==4){if(process_vm_readv(peer,&rl,1,&rf,1,0)!=(ssize_t)len)return 1; memmove(out+me*len,in+me*len,len);}
   if(mode==5){if(process_vm_writev(peer,&wl,1,&wf,1,0)!=(ssize_t)len)return 1; memmove(out+me*len,in+me*len,len);}
   if(mode==6){memmove(out+me*len,in+me*len,len); if(process_vm_readv(peer,&rl,1,&rf,1,0)!=(ssize_t)len)return 1;}
   __atomic_add_fetch(&ctl[17],1,__ATOMIC_SEQ_CST); while(ctl[17]<bar);
   ts[mode][i]=now()-t0;
 }
 if(me==0) for(int k=0;k<nm;k++){int mode=modes[k]-'0'; double*t=ts[mode];
   for(int i=0;i<iters;i++)for(int j=i+1;j<iters;j++)if(t[j]<t[i]){double x=t[i];t[i]=t[j];t[j]=x;}
   printf("block %zu MiB mode %d: median %.3f ms\n",len>>20,mode,t[iters/2]*1e3);}
 if(!me) wait(0);
 return 0;}
