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

static uint64_t expected(size_t i, int rank) { return (uint64_t)i * 0x9E3779B97F4A7C15ULL + (uint64_t)rank; }

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
    double ckpt_s = 0, restart_s = 0;
    if (strcmp(mode, "ckpt") == 0) {
        for (size_t i = 0; i < n; i++) buf[i] = expected(i, rank);
        MPI_Barrier(app);
        double t1 = MPI_Wtime();
        rc = FTI_Checkpoint(1, level);
        ckpt_s = MPI_Wtime() - t1;
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
    ckpt_s = slowest(ckpt_s, app);
    restart_s = slowest(restart_s, app);
    final_s = slowest(final_s, app);
    init_s = slowest(init_s, app);
    if (rank == 0)
        printf("BENCHRESULT mode=%s ranks=%d mib=%ld level=%d ok=%d init_s=%.4f ckpt_s=%.4f restart_s=%.4f "
               "final_s=%.4f\n", mode, size, (long)(nbytes >> 20), level, all_ok, init_s, ckpt_s, restart_s,
               final_s);
    fflush(stdout);
    MPI_Comm_free(&app);
    free(buf);
    MPI_Finalize();
    return all_ok ? 0 : 1;
}
