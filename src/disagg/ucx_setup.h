#pragma once
// What the UCX transport sets up before it uses UCX: the process-wide pieces (connection
// manager settings read from the environment, UCX's log sent to stderr) and the settings
// whose defaults are wrong for us. Values the user set through UCX_* variables win.
#include <ucp/api/ucp.h>

namespace moe::disagg::ucx {

// Once per process, before any worker.
void prepare_ucx_process();
// On a configuration read with ucp_config_read.
void apply_ucx_defaults(ucp_config_t* config);

}  // namespace moe::disagg::ucx
