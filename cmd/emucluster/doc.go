// Command emucluster makes and drives an emulated cluster on this machine
// (package internal/emucluster): nodes as network namespaces joined by a
// bridge, each link shaped by tc, with loss and a switch that silences a
// node's link. It needs root and iproute2.
//
//	emucluster up -n 3 [-rate 1gbit] [-loss 0.02] [-name NAME]   make it; prints the nodes
//	emucluster down NAME                 kill what runs on it, remove it
//	emucluster exec NAME NODE CMD...     run CMD on node NODE (an index, hostname or address)
//	emucluster silence NAME NODE         drop every packet to and from the node (no reset)
//	emucluster mend NAME NODE            undo silence
//	emucluster loss NAME NODE P          drop the share P of the node's packets each way
//	emucluster rate NAME NODE RATE       change the node's link rate (0: unshaped)
//	emucluster shim NAME DIR             write DIR/ssh, which reaches the nodes as ssh would
//	emucluster ssh [SSH ARGS] HOST CMD   what DIR/ssh runs (cluster from $EMUCLUSTER)
//
// With DIR first on PATH, `gohorovodrun -H NAME-0:2,NAME-1:2 ...` and
// mpirun reach the nodes through the shim, as they would reach hosts over
// ssh. Only addresses inside the namespaces (10.88.0.0/24) are used.
package main
