#pragma once
// The expert-parallel group over MPI (OpenMPI): the ranks `mpirun` started. MPI is set up
// on construction (MPI_THREAD_SERIALIZED: one thread at a time makes MPI calls, whichever
// thread that is) and torn down on destruction; one per process.
//
// Every collective is started non-blocking and waited on with a deadline, yielding the core
// while it waits: ranks may outnumber cores, and a blocked rank must not starve the one it
// waits for. Past the deadline it throws moe::Error saying which exchange timed out.
#include <chrono>
#include <memory>

#include "moe/ep_comm.h"

namespace moe {

class MpiComm final : public EpComm {
 public:
  explicit MpiComm(std::chrono::milliseconds timeout);
  ~MpiComm() override;
  MpiComm(const MpiComm&) = delete;
  MpiComm& operator=(const MpiComm&) = delete;

  // Whether this process was started by mpirun (its environment names a rank).
  static bool launched_by_mpirun();

  int32_t rank() const override { return rank_; }
  int32_t size() const override { return size_; }
  std::vector<int64_t> exchange_counts(const std::vector<int64_t>& to_each, const char* what) override;
  void all_to_all(const uint8_t* send, const std::vector<int64_t>& send_bytes, uint8_t* recv,
                  const std::vector<int64_t>& recv_bytes, const char* what) override;
  bool meet_within(std::chrono::milliseconds limit) override;
  int64_t sum_over_ranks(int64_t value, const char* what) override;
  void sum_each(std::vector<int64_t>& values, const char* what) override;
  Transfer start_send(int32_t to, const uint8_t* data, int64_t bytes) override;
  Transfer start_recv(int32_t from, uint8_t* data, int64_t bytes) override;
  bool done(Transfer t) override;

 private:
  struct Impl;

  std::chrono::milliseconds timeout_;
  int32_t rank_ = 0;
  int32_t size_ = 1;
  std::unique_ptr<Impl> impl_;
};

}  // namespace moe
