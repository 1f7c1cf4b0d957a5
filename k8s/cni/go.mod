// Pins the CNI plugins scripts/k8s installs (bridge, loopback, host-local).
// A module of its own so that their dependency versions never meet
// Kubernetes's.
module arbiter.local/k8s/cni

go 1.24.0

require github.com/containernetworking/plugins v1.7.1

require (
	github.com/alexflint/go-filemutex v1.3.0 // indirect
	github.com/containernetworking/cni v1.3.0 // indirect
	github.com/coreos/go-iptables v0.8.0 // indirect
	github.com/networkplumbing/go-nft v0.4.0 // indirect
	github.com/pkg/errors v0.9.1 // indirect
	github.com/safchain/ethtool v0.5.10 // indirect
	github.com/vishvananda/netlink v1.3.1-0.20250303224720-0e7078ed04c8 // indirect
	github.com/vishvananda/netns v0.0.5 // indirect
	golang.org/x/sys v0.32.0 // indirect
	sigs.k8s.io/knftables v0.0.18 // indirect
)
