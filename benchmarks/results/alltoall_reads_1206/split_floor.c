// 2-rank alltoall copy floor with numpy-like inputs (mmap'd at a 4 KiB offset, madvise'd HUGEPAGE from there,
// as numpy does for arrays >= 4 MiB) and huge-page outputs. mode 1: the cross block written whole
// (process_vm_writev); mode 3: its 4 KiB-page ends written, its huge-page interior read by the receiver.
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
 p=(char*)(((unsigned long)p+H-1)&~(H-1)); madvise(p,n,MADV_HUGEPAGE); memset(p,1,n); return p;}
static char *npbuf(size_t n){char*p=mmap(0,n+2*H,PROT_READ|PROT_WRITE,MAP_PRIVATE|MAP_ANONYMOUS,-1,0);
 p=(char*)((((unsigned long)p+H-1)&~(H-1))+H/2+16); /* numpy: malloc'd, 16 B past a page */
 char*a=(char*)(((unsigned long)p+4095)&~4095UL); madvise(a,p+n-a,MADV_HUGEPAGE); memset(p,1,n); return p;}
int main(int argc,char**argv){
 size_t len=(size_t)atol(argv[1])<<20; int mode=atoi(argv[2]); int iters=atoi(argv[3]);
 volatile long *ctl=mmap(0,4096,PROT_READ|PROT_WRITE,MAP_SHARED|MAP_ANONYMOUS,-1,0);
 int me = fork()==0 ? 1 : 0;
 char*in=npbuf(2*len),*out=outbuf(2*len);
 ctl[4*me]=getpid(); ctl[4*me+1]=(long)in; ctl[4*me+2]=(long)out; ctl[8+me]=1;
 while(!ctl[8+1-me]);
 pid_t peer=ctl[4*(1-me)]; char*fin=(char*)ctl[4*(1-me)+1], *fout=(char*)ctl[4*(1-me)+2];
 double ts[1000];
 for(int i=0;i<iters;i++){
   __atomic_add_fetch(&ctl[16],1,__ATOMIC_SEQ_CST); while(ctl[16]<2*(i+1));
   double t0=now();
   memmove(out+me*len,in+me*len,len);
   char*mine=in+(1-me)*len; /* my block for the peer */
   if(mode==1){struct iovec l={mine,len},f={fout+me*len,len}; if(process_vm_writev(peer,&l,1,&f,1,0)!=(ssize_t)len){perror("w");return 1;}}
   else {
     char*a=(char*)(((unsigned long)mine+H-1)&~(H-1)), *b=(char*)(((unsigned long)(mine+len))&~(H-1));
     struct iovec l[2]={{mine,a-mine},{b,mine+len-b}}, f[2]={{fout+me*len,a-mine},{fout+me*len+(b-mine),mine+len-b}};
     if(process_vm_writev(peer,l,2,f,2,0)<0){perror("w");return 1;}
     /* the peer's block for me: its interior, read */
     char*pb=fin+me*len; char*pa=(char*)(((unsigned long)pb+H-1)&~(H-1)), *pe=(char*)(((unsigned long)(pb+len))&~(H-1));
     struct iovec L={out+(1-me)*len+(pa-pb),pe-pa}, F={pa,pe-pa};
     if(process_vm_readv(peer,&L,1,&F,1,0)!=pe-pa){perror("r");return 1;}
   }
   __atomic_add_fetch(&ctl[17],1,__ATOMIC_SEQ_CST); while(ctl[17]<2*(i+1));
   ts[i]=now()-t0;
 }
 for(int i=0;i<iters;i++)for(int j=i+1;j<iters;j++)if(ts[j]<ts[i]){double x=ts[i];ts[i]=ts[j];ts[j]=x;}
 if(me==0) printf("block %zu MiB mode=%d: median %.3f ms\n",len>>20,mode,ts[iters/2]*1e3);
 if(!me) wait(0);
 return 0;}
