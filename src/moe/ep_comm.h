#pragma once
// The collectives an expert-parallel group needs, with a bound on every wait: a peer that
// died or hangs becomes an error naming the operation and the wait, not a hang.
// MpiComm (mpi_comm.h) is the real group; SoloComm is the group of one process.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <vector>

#include "core/error.h"

namespace moe {

class EpComm {
 public:
  virtual ~EpComm() = default;
  virtual int32_t rank() const = 0;
  virtual int32_t size() const = 0;

  // Each rank tells every rank a count (to_each[r] for rank r) and learns what every rank
  // told it: the result's [r] is rank r's count for this rank. `what` names the exchange in
  // errors.
  virtual std::vector<int64_t> exchange_counts(const std::vector<int64_t>& to_each, const char* what) = 0;
  // Sends send_bytes[r] bytes to rank r (blocks laid out in rank order in `send`) and
  // receives recv_bytes[r] from rank r (in rank order into `recv`).
  virtual void all_to_all(const uint8_t* send, const std::vector<int64_t>& send_bytes, uint8_t* recv,
                          const std::vector<int64_t>& recv_bytes, const char* what) = 0;
  // Waits up to `limit` for every rank to reach this call; false when some did not.
  virtual bool meet_within(std::chrono::milliseconds limit) = 0;
  // The sum of every rank's value.
  virtual int64_t sum_over_ranks(int64_t value, const char* what) = 0;
  // Each element replaced by its sum over the ranks (every rank gives as many).
  virtual void sum_each(std::vector<int64_t>& values, const char* what) = 0;

  // Point-to-point copies that go on in the background while the collectives run (the
  // weights of moved experts). Between two ranks, receives match sends in the order each
  // side started them. done() polls without waiting; once it said true the id is spent.
  using Transfer = int64_t;
  virtual Transfer start_send(int32_t to, const uint8_t* data, int64_t bytes) = 0;
  virtual Transfer start_recv(int32_t from, uint8_t* data, int64_t bytes) = 0;
  virtual bool done(Transfer t) = 0;
};

class SoloComm final : public EpComm {
 public:
  int32_t rank() const override { return 0; }
  int32_t size() const override { return 1; }
  std::vector<int64_t> exchange_counts(const std::vector<int64_t>& to_each, const char*) override { return to_each; }
  void all_to_all(const uint8_t* send, const std::vector<int64_t>& send_bytes, uint8_t* recv,
                  const std::vector<int64_t>&, const char*) override {
    std::copy_n(send, send_bytes[0], recv);
  }
  bool meet_within(std::chrono::milliseconds) override { return true; }
  int64_t sum_over_ranks(int64_t value, const char*) override { return value; }
  void sum_each(std::vector<int64_t>&, const char*) override {}
  // A group of one has nobody to copy to or from.
  Transfer start_send(int32_t, const uint8_t*, int64_t) override { fail("a group of one rank has no peer to send to"); }
  Transfer start_recv(int32_t, uint8_t*, int64_t) override { fail("a group of one rank has no peer to receive from"); }
  bool done(Transfer) override { return true; }
};

}  // namespace moe
