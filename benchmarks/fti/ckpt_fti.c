/* FTI side of benchmarks/fti (twin: ckpt_ftkit.py). One protected buffer per application rank.
 *
 *   mpirun -n P ckpt_fti CONFIG ckpt    MIB LEVEL   # FTI_Init, Protect, Checkpoint(1, LEVEL), Finalize
 *   mpirun -n P ckpt_fti CONFIG recover MIB 0       # FTI_Init, Protect, Recover, Finalize (the relaunch)
 *
 * Buffer: MIB MiB of uint64, element i of rank r = i * 0x9E3779B97F4A7C15 + r, all pages touched before any
 * timing. Times (MPI_Wtime, slowest application rank):
 *   ckpt_s    FTI_Checkpoint(1, LEVEL), from a barrier (with head = 1: the application's blocking time)
 *   final_s   FTI_Finalize
 *   init_s    FTI_Init alone
 *   restart_s FTI_Init + FTI_Protect + FTI_Recover, from a barrier; the whole buffer is compared afterwards
 * Prints one line "BENCHRESULT key=value ...". Exit status 1 on a wrong restart.
 */
#include <fti.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

static uint64_t expected(size_t i, int rank) { return (uint64_t)i * 0x9E3779B97F4A7C15ULL + (uint64_t)rank; }

/* The calling thread's CPU and run-queue seconds (/proc/thread-self/schedstat), the process's CPU seconds (all
 * threads, getrusage) and the bytes it sent to storage (/proc/self/io write_bytes): where a call's time went. */
typedef struct { double cpu, runq, pcpu, wbytes; } usage_t;
static usage_t usage_now(void) {
    usage_t u = {0, 0, 0, 0};
    unsigned long long a = 0, b = 0;
    FILE *f = fopen("/proc/thread-self/schedstat", "r");
    if (f) { if (fscanf(f, "%llu %llu", &a, &b) == 2) { u.cpu = a * 1e-9; u.runq = b * 1e-9; } fclose(f); }
    struct rusage r;
    getrusage(RUSAGE_SELF, &r);
    u.pcpu = r.ru_utime.tv_sec + r.ru_stime.tv_sec + 1e-6 * (r.ru_utime.tv_usec + r.ru_stime.tv_usec);
    char line[128];
    f = fopen("/proc/self/io", "r");
    if (f) {
        while (fgets(line, sizeof line, f)) if (sscanf(line, "write_bytes: %llu", &a) == 1) u.wbytes = (double)a;
        fclose(f);
    }
    return u;
}

static double slowest(double x, MPI_Comm comm) {
    double y;
    MPI_Allreduce(&x, &y, 1, MPI_DOUBLE, MPI_MAX, comm);
    return y;
}

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: %s CONFIG ckpt|recover MIB LEVEL\n", argv[0]);
        return 2;
    }
    const char *config = argv[1], *mode = argv[2];
    size_t nbytes = (size_t)atol(argv[3]) << 20, n = nbytes / sizeof(uint64_t);
    int level = atoi(argv[4]);
    MPI_Init(&argc, &argv);
    uint64_t *buf = malloc(nbytes);
    if (buf == NULL) MPI_Abort(MPI_COMM_WORLD, 2);
    memset(buf, 0, nbytes);
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    if (FTI_Init(config, MPI_COMM_WORLD) != FTI_SCES) MPI_Abort(MPI_COMM_WORLD, 3);
    double init_s = MPI_Wtime() - t0;          /* head ranks serve inside FTI_Init and never get here */
    MPI_Comm app;
    MPI_Comm_dup(FTI_COMM_WORLD, &app);        /* still valid after FTI_Finalize */
    int rank, size;
    MPI_Comm_rank(app, &rank);
    MPI_Comm_size(app, &size);
    FTI_Protect(0, buf, (int32_t)n, FTI_ULNG);
    int ok = 1, rc = 0, status = FTI_Status();
    double ckpt_s = 0, restart_s = 0, cpu_s = 0, runq_s = 0, pcpu_s = 0, wmib = 0;
    if (strcmp(mode, "ckpt") == 0) {
        for (size_t i = 0; i < n; i++) buf[i] = expected(i, rank);
        MPI_Barrier(app);
        usage_t u0 = usage_now();
        double t1 = MPI_Wtime();
        rc = FTI_Checkpoint(1, level);
        ckpt_s = MPI_Wtime() - t1;
        usage_t u1 = usage_now();
        cpu_s = u1.cpu - u0.cpu;
        runq_s = u1.runq - u0.runq;
        pcpu_s = u1.pcpu - u0.pcpu;
        wmib = (u1.wbytes - u0.wbytes) / 1048576.0;
        ok = rc == FTI_DONE || rc == FTI_SCES;
    } else {
        rc = FTI_Recover();
        restart_s = MPI_Wtime() - t0;
        for (size_t i = 0; i < n && ok; i++) ok = buf[i] == expected(i, rank);
        ok = ok && rc == FTI_SCES && status != 0;
    }
    MPI_Barrier(app);
    double t2 = MPI_Wtime();
    FTI_Finalize();
    double final_s = MPI_Wtime() - t2;
    int all_ok;
    MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, app);
    double blk_s = slowest(ckpt_s - cpu_s - runq_s, app);  /* the calling thread off CPU, not waiting for one */
    cpu_s = slowest(cpu_s, app);
    runq_s = slowest(runq_s, app);
    pcpu_s = slowest(pcpu_s, app);
    double wsum;
    MPI_Allreduce(&wmib, &wsum, 1, MPI_DOUBLE, MPI_SUM, app);
    ckpt_s = slowest(ckpt_s, app);
    restart_s = slowest(restart_s, app);
    final_s = slowest(final_s, app);
    init_s = slowest(init_s, app);
    if (rank == 0)
        printf("BENCHRESULT mode=%s ranks=%d mib=%ld level=%d ok=%d init_s=%.4f ckpt_s=%.4f restart_s=%.4f "
               "final_s=%.4f cpu_s=%.4f pcpu_s=%.4f runq_s=%.4f blk_s=%.4f wmib=%.1f\n", mode, size,
               (long)(nbytes >> 20), level, all_ok, init_s, ckpt_s, restart_s, final_s, cpu_s, pcpu_s, runq_s,
               blk_s, wsum);
    fflush(stdout);
    MPI_Comm_free(&app);
    free(buf);
    MPI_Finalize();
    return all_ok ? 0 : 1;
}
