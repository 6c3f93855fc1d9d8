// The judging parameters of the harness.* settings: what the actors that make jobs (episodes,
// `check`, `bench harness`) put into every job they send (messages.hpp judging_parameters).
#pragma once

#include "config/settings.hpp"
#include "messages/messages.hpp"

namespace cuda_agent::harness {

judging_parameters judging_from(const settings& config);

}  // namespace cuda_agent::harness
