// Measured: ompi_parts.txt (2026-12-06). mpicc -O2 -o a2a ompi_parts.c; mpirun -np 2 ./a2a BLOCK_MIB ITERS
// Open MPI's 2-rank alltoall against its parts, interleaved call by call: MPI_Alltoall of 2 blocks; MPI_Sendrecv
// of the cross block alone; memcpy of the own block alone; the floor order.c's mode 1 is not here.
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#define H (2UL<<20)
static char *npbuf(size_t n){char*p=mmap(0,n+2*H,PROT_READ|PROT_WRITE,MAP_PRIVATE|MAP_ANONYMOUS,-1,0);
 p=(char*)((((unsigned long)p+H-1)&~(H-1))+H/2+16);
 char*a=(char*)(((unsigned long)p+4095)&~4095UL); madvise(a,p+n-a,MADV_HUGEPAGE); memset(p,1,n); return p;}
static int cmp(const void*a,const void*b){double x=*(double*)a,y=*(double*)b;return x<y?-1:x>y;}
int main(int argc,char**argv){
 MPI_Init(&argc,&argv); int r; MPI_Comm_rank(MPI_COMM_WORLD,&r);
 size_t len=(size_t)atol(argv[1])<<20; int iters=atoi(argv[2]);
 char*in=npbuf(2*len),*out=npbuf(2*len);
 double t[3][1000];
 for(int i=0;i<iters;i++) for(int k=0;k<3;k++){
   MPI_Barrier(MPI_COMM_WORLD); double t0=MPI_Wtime();
   if(k==0) MPI_Alltoall(in,len,MPI_BYTE,out,len,MPI_BYTE,MPI_COMM_WORLD);
   if(k==1) MPI_Sendrecv(in+(1-r)*len,len,MPI_BYTE,1-r,7,out+(1-r)*len,len,MPI_BYTE,1-r,7,MPI_COMM_WORLD,MPI_STATUS_IGNORE);
   if(k==2) memcpy(out+r*len,in+r*len,len);
   double dt=MPI_Wtime()-t0, mx; MPI_Allreduce(&dt,&mx,1,MPI_DOUBLE,MPI_MAX,MPI_COMM_WORLD); t[k][i]=mx;}
 if(r==0){const char*nm[3]={"MPI_Alltoall","MPI_Sendrecv cross","memcpy own"};
   for(int k=0;k<3;k++){qsort(t[k],iters,sizeof(double),cmp); printf("%zu MiB blocks %-20s median %.3f ms\n",len>>20,nm[k],t[k][iters/2]*1e3);}}
 MPI_Finalize(); return 0;}
