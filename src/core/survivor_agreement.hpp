// SPDX-License-Identifier: BSD-3-Clause
// The survivors of a failed group agree, through the store, on who is still in it: the first step
// of ProcessGroup::shrink() (process_group.hpp), independent of the backend.
//
// Each survivor appends its rank to one key, then waits until every rank it does not know to be
// dead has done so, or until `grace` has passed; the first survivor to get there writes the list
// it saw as the decision (compare_set: one decision, whoever wrote it), and every survivor takes
// that decision. A rank that arrives after it (stopped, slow, partitioned) finds itself left out
// and is fenced: it gets Error{aborted} and never takes part in the survivors' group. A rank that
// appended its rank and then died is in the decision; forming the survivors' group finds it, and
// the survivors agree again (a new round, in a new namespace) without it.
#pragma once

#include "core/private.hpp"

#include <string>
#include <vector>

#include <chorus/deadline.hpp>
#include <chorus/store.hpp>

namespace chorus::detail {

struct SurvivorAgreement {
  int rank = 0;                 // this rank in the group that failed
  int size = 1;                 // that group's size
  std::string group;            // its name, for messages
  std::vector<int> known_dead;  // ranks this rank knows to be gone (need not be waited for)
  Duration grace{};             // how long to wait for a rank not known to be dead
  Deadline deadline;            // the bound of the whole agreement
};

// The survivors, sorted, from `store` (a namespace of this round only). Throws Error{aborted}
// naming the decision when this rank is not among them, TimeoutError past the deadline.
std::vector<int> agree_on_survivors(Store& store, const SurvivorAgreement& a);

}  // namespace chorus::detail
