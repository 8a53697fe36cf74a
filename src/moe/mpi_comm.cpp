#include "moe/mpi_comm.h"

#include <mpi.h>

#include <climits>
#include <unordered_map>
#include <cstdlib>
#include <thread>

#include "core/error.h"

namespace moe {

struct MpiComm::Impl {
  MPI_Comm comm = MPI_COMM_NULL;
  MPI_Comm copies = MPI_COMM_NULL;  // point-to-point weight copies, apart from the collectives
  std::unordered_map<Transfer, MPI_Request> transfers;
  Transfer next_transfer = 0;
  // A collective that timed out is still pending: finalizing would wait for it forever.
  bool broken = false;

  void wait(MPI_Request& request, std::chrono::milliseconds timeout, int32_t rank, const char* what) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (int polls = 0;; ++polls) {
      int done = 0;
      MPI_Test(&request, &done, MPI_STATUS_IGNORE);
      if (done) return;
      if (std::chrono::steady_clock::now() > deadline) {
        broken = true;
        fail("expert-parallel rank {}: the {} did not complete within {} ms: another rank has stopped or is stuck", rank,
             what, timeout.count());
      }
      if (polls < 64) {
        std::this_thread::yield();
      } else {
        std::this_thread::sleep_for(std::chrono::microseconds(20));
      }
    }
  }
};

namespace {

void check(int rc, const char* call) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  fail("{} failed: {}", call, std::string(text, size_t(len)));
}

// MPI counts and displacements are ints.
std::vector<int> int_counts(const std::vector<int64_t>& bytes, std::vector<int>& displs, const char* what) {
  std::vector<int> counts(bytes.size());
  displs.assign(bytes.size(), 0);
  int64_t at = 0;
  for (size_t r = 0; r < bytes.size(); ++r) {
    if (bytes[r] < 0 || at + bytes[r] > INT_MAX) fail("the {} moves more than 2 GiB in one step", what);
    counts[r] = int(bytes[r]);
    displs[r] = int(at);
    at += bytes[r];
  }
  return counts;
}

}  // namespace

bool MpiComm::launched_by_mpirun() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr || std::getenv("PMIX_RANK") != nullptr ||
         std::getenv("PMI_SIZE") != nullptr;
}

MpiComm::MpiComm(std::chrono::milliseconds timeout) : timeout_(timeout), impl_(std::make_unique<Impl>()) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized) fail("MPI is already set up in this process: one expert-parallel group per process");
  int provided = 0;
  check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided), "MPI_Init_thread");
  if (provided < MPI_THREAD_SERIALIZED) {
    MPI_Finalize();
    fail("this MPI library cannot be called from more than one thread (it provides level {})", provided);
  }
  MPI_Comm_dup(MPI_COMM_WORLD, &impl_->comm);
  MPI_Comm_set_errhandler(impl_->comm, MPI_ERRORS_RETURN);
  MPI_Comm_dup(MPI_COMM_WORLD, &impl_->copies);
  MPI_Comm_set_errhandler(impl_->copies, MPI_ERRORS_RETURN);
  int r = 0, n = 0;
  MPI_Comm_rank(impl_->comm, &r);
  MPI_Comm_size(impl_->comm, &n);
  rank_ = r;
  size_ = n;
}

MpiComm::~MpiComm() {
  if (impl_->broken || !impl_->transfers.empty()) return;
  MPI_Comm_free(&impl_->copies);
  MPI_Comm_free(&impl_->comm);
  MPI_Finalize();
}

std::vector<int64_t> MpiComm::exchange_counts(const std::vector<int64_t>& to_each, const char* what) {
  if (int64_t(to_each.size()) != size_) fail("{}: {} counts for {} ranks", what, to_each.size(), size_);
  std::vector<int64_t> from_each(to_each.size());
  MPI_Request request;
  check(MPI_Ialltoall(to_each.data(), 1, MPI_INT64_T, from_each.data(), 1, MPI_INT64_T, impl_->comm, &request),
        "MPI_Ialltoall");
  impl_->wait(request, timeout_, rank_, what);
  return from_each;
}

void MpiComm::all_to_all(const uint8_t* send, const std::vector<int64_t>& send_bytes, uint8_t* recv,
                         const std::vector<int64_t>& recv_bytes, const char* what) {
  std::vector<int> send_displs, recv_displs;
  const std::vector<int> send_counts = int_counts(send_bytes, send_displs, what);
  const std::vector<int> recv_counts = int_counts(recv_bytes, recv_displs, what);
  MPI_Request request;
  check(MPI_Ialltoallv(send, send_counts.data(), send_displs.data(), MPI_BYTE, recv, recv_counts.data(),
                       recv_displs.data(), MPI_BYTE, impl_->comm, &request),
        "MPI_Ialltoallv");
  impl_->wait(request, timeout_, rank_, what);
}

bool MpiComm::meet_within(std::chrono::milliseconds limit) {
  MPI_Request request;
  check(MPI_Ibarrier(impl_->comm, &request), "MPI_Ibarrier");
  try {
    impl_->wait(request, limit, rank_, "meeting of the ranks");
  } catch (const Error&) {
    return false;
  }
  return true;
}

int64_t MpiComm::sum_over_ranks(int64_t value, const char* what) {
  int64_t result = 0;
  MPI_Request request;
  check(MPI_Iallreduce(&value, &result, 1, MPI_INT64_T, MPI_SUM, impl_->comm, &request), "MPI_Iallreduce");
  impl_->wait(request, timeout_, rank_, what);
  return result;
}

void MpiComm::sum_each(std::vector<int64_t>& values, const char* what) {
  if (values.size() > size_t(INT_MAX)) fail("the {} sums more than 2^31 values", what);
  MPI_Request request;
  check(MPI_Iallreduce(MPI_IN_PLACE, values.data(), int(values.size()), MPI_INT64_T, MPI_SUM, impl_->comm, &request),
        "MPI_Iallreduce");
  impl_->wait(request, timeout_, rank_, what);
}

EpComm::Transfer MpiComm::start_send(int32_t to, const uint8_t* data, int64_t bytes) {
  if (bytes < 0 || bytes > INT_MAX) fail("one weight copy of {} bytes is over 2 GiB", bytes);
  MPI_Request request;
  check(MPI_Isend(data, int(bytes), MPI_BYTE, to, 0, impl_->copies, &request), "MPI_Isend");
  impl_->transfers.emplace(impl_->next_transfer, request);
  return impl_->next_transfer++;
}

EpComm::Transfer MpiComm::start_recv(int32_t from, uint8_t* data, int64_t bytes) {
  if (bytes < 0 || bytes > INT_MAX) fail("one weight copy of {} bytes is over 2 GiB", bytes);
  MPI_Request request;
  check(MPI_Irecv(data, int(bytes), MPI_BYTE, from, 0, impl_->copies, &request), "MPI_Irecv");
  impl_->transfers.emplace(impl_->next_transfer, request);
  return impl_->next_transfer++;
}

bool MpiComm::done(Transfer t) {
  const auto it = impl_->transfers.find(t);
  if (it == impl_->transfers.end()) return true;
  int flag = 0;
  check(MPI_Test(&it->second, &flag, MPI_STATUS_IGNORE), "MPI_Test");
  if (flag) impl_->transfers.erase(it);
  return flag != 0;
}

}  // namespace moe
