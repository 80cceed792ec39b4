// SPDX-License-Identifier: BSD-3-Clause
// --elastic over several nodes (--nnodes > 1). Every node runs one attempt; nothing restarts
// the job as a whole. --min-ranks and --max-restarts are the job's: a node counts its lost and
// restarted ranks in node 0's store, so a rank failure anywhere is tolerated while the whole job
// keeps --min-ranks ranks. A node whose chorusrun dies takes its ranks with it (they die with
// their parent): the ranks on the other nodes shrink their group without them, as they do for
// any lost rank. A node that falls below --min-ranks declares the job failed (the restart
// rounds' verdict, chorusrun_rounds.hpp) and every node stops its ranks. Node 0 hosts the store,
// so it stays until every other node has finished or gone silent (a heartbeat per second;
// silent for kNodeSilence), then declares the job done, which lets the others exit too. Keys,
// in node 0's store:
//   chorusrun/elastic/lost          counter: ranks the job lost for good
//   chorusrun/elastic/restarts      counter: ranks restarted as joiners
//   chorusrun/elastic/beat/<node>   counter: that node's chorusrun heartbeats
//   chorusrun/elastic/finished/<node>  set once that node's ranks are all done
#pragma once

#include "chorusrun_supervisor.hpp"

namespace chorusrun {

// Runs the job on this node; returns chorusrun's exit status.
int run_elastic_job(const LaunchPlan& plan, int signal_fd);

}  // namespace chorusrun
