/* The MPI communicator (OpenMPI). Part of the hyla binary, not of the library: only the CLI
 * links MPI. */
#ifndef HYLA_PARALLEL_COMM_MPI_H
#define HYLA_PARALLEL_COMM_MPI_H

#include "parallel/comm.h"

/* Launched by mpirun (its environment says so): MPI_Init and the world communicator. Otherwise
 * hyla_comm_self(), and MPI is never initialised. */
hyla_comm *hyla_comm_mpi_open(int *argc, char ***argv);
/* MPI_Finalize if it was initialised. */
void hyla_comm_mpi_close(hyla_comm *c);

#endif
