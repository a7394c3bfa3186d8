/* mpi_check: a small MPI program whose results are checked, to prove that Open MPI runs over a
 * vnic (tests/system/ucx_mpi.sh, docs/IBVERBS.md "UCX and Open MPI"). Two ranks or more:
 *   - point to point: rank 0 sends rank 1 a message of each size (1 B to 4 MiB, so UCX's eager
 *     and rendezvous protocols both run) filled with a pattern that depends on size and
 *     round; rank 1 checks every byte and sends it back with each byte incremented; rank 0
 *     checks the reply;
 *   - collective: an MPI_Allreduce (sum) of a vector whose expected total each rank computes
 *     from the rank count alone.
 * Prints one line per part and exits 0 only when every byte and every sum was right. */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { kRounds = 3, kAllreduceLength = 1 << 16 };

static unsigned char pattern(size_t size, int round, size_t i) {
  return (unsigned char)((i * 131u + size * 7u + (size_t)round * 17u) & 0xFF);
}

/* Number of wrong bytes in `buffer` against the pattern plus `offset`. */
static size_t count_wrong(const unsigned char* buffer, size_t size, int round, unsigned offset) {
  size_t wrong = 0;
  for (size_t i = 0; i < size; ++i)
    if (buffer[i] != (unsigned char)(pattern(size, round, i) + offset)) ++wrong;
  return wrong;
}

/* Rank 0 and 1 exchange every size kRounds times; returns the number of wrong bytes seen. */
static size_t point_to_point(int rank, unsigned char* buffer, size_t max_size, size_t* messages) {
  size_t wrong = 0;
  for (int round = 0; round < kRounds; ++round) {
    for (size_t size = 1; size <= max_size; size *= 4) {
      const int tag = (int)(round * 64 + __builtin_ctzl(size));
      if (rank == 0) {
        for (size_t i = 0; i < size; ++i) buffer[i] = pattern(size, round, i);
        MPI_Send(buffer, (int)size, MPI_UNSIGNED_CHAR, 1, tag, MPI_COMM_WORLD);
        memset(buffer, 0, size);
        MPI_Recv(buffer, (int)size, MPI_UNSIGNED_CHAR, 1, tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        wrong += count_wrong(buffer, size, round, 1);
      } else if (rank == 1) {
        memset(buffer, 0, size);
        MPI_Recv(buffer, (int)size, MPI_UNSIGNED_CHAR, 0, tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        wrong += count_wrong(buffer, size, round, 0);
        for (size_t i = 0; i < size; ++i) buffer[i] = (unsigned char)(buffer[i] + 1);
        MPI_Send(buffer, (int)size, MPI_UNSIGNED_CHAR, 0, tag, MPI_COMM_WORLD);
      }
      ++*messages;
    }
  }
  return wrong;
}

/* Each rank contributes element i = rank * kAllreduceLength + i; returns the number of wrong
 * sums. */
static size_t allreduce(int rank, int ranks) {
  int64_t* mine = malloc(sizeof(int64_t) * kAllreduceLength);
  int64_t* sums = malloc(sizeof(int64_t) * kAllreduceLength);
  if (mine == NULL || sums == NULL) MPI_Abort(MPI_COMM_WORLD, 2);
  for (int64_t i = 0; i < kAllreduceLength; ++i) mine[i] = (int64_t)rank * kAllreduceLength + i;
  MPI_Allreduce(mine, sums, kAllreduceLength, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
  size_t wrong = 0;
  const int64_t rank_sum = (int64_t)ranks * (ranks - 1) / 2;
  for (int64_t i = 0; i < kAllreduceLength; ++i)
    if (sums[i] != rank_sum * kAllreduceLength + (int64_t)ranks * i) ++wrong;
  free(mine);
  free(sums);
  return wrong;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, ranks = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  if (ranks < 2) {
    if (rank == 0) fprintf(stderr, "mpi_check: needs at least 2 ranks (mpirun -np 2)\n");
    MPI_Finalize();
    return 2;
  }
  char host[MPI_MAX_PROCESSOR_NAME];
  int host_length = 0;
  MPI_Get_processor_name(host, &host_length);

  const size_t max_size = (size_t)4 << 20;
  unsigned char* buffer = malloc(max_size);
  if (buffer == NULL) MPI_Abort(MPI_COMM_WORLD, 2);
  size_t messages = 0;
  const size_t p2p_wrong = point_to_point(rank, buffer, max_size, &messages);
  free(buffer);
  const size_t sum_wrong = allreduce(rank, ranks);

  unsigned long local[2] = {p2p_wrong, sum_wrong}, total[2] = {0, 0};
  MPI_Reduce(local, total, 2, MPI_UNSIGNED_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
  printf("mpi_check: rank %d of %d on %s: %zu messages, %zu wrong bytes; allreduce of %d int64: %zu wrong sums\n",
         rank, ranks, host, rank <= 1 ? messages : 0, p2p_wrong, kAllreduceLength, sum_wrong);
  int status = 0;
  if (rank == 0) {
    status = (total[0] == 0 && total[1] == 0) ? 0 : 1;
    printf("mpi_check: %s (%lu wrong bytes, %lu wrong sums over all ranks)\n",
           status == 0 ? "PASS" : "FAIL", total[0], total[1]);
  }
  MPI_Bcast(&status, 1, MPI_INT, 0, MPI_COMM_WORLD);
  MPI_Finalize();
  return status;
}
