#pragma once
// GET /admin/expert-state of an expert-parallel rank, for the dashboard: the group's
// expert load over the recorded window (per MoE layer and expert), the pairs each rank
// computed, the placement in use (the experts each rank holds), the imbalance per layer in
// each recent 2 s period, and the re-placements so far. Every rank of a group answers the
// same figures but its "rank" (the load is synced group-wide). Fields: docs/api.md.
#include "moe/expert_parallel.h"
#include "server/json_fields.h"

namespace moe::server {

Json expert_state_json(const ExpertParallel& ep);

}  // namespace moe::server
