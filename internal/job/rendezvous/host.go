package rendezvous

import (
	"fmt"
	"net"
)

// ListenHost picks the address a worker's transport listens on and
// publishes to its peers (its Member.Data): explicit when set
// (GOHOROVOD_GLOO_ADDR); else the first address of the interface iface
// (HOROVOD_GLOO_IFACE), IPv4 first; else the address this host uses to
// reach the rendezvous server ("host:port"), found without sending
// anything, which is 127.0.0.1 for a job on one machine.
func ListenHost(explicit, iface, server string) (string, error) {
	if explicit != "" {
		return explicit, nil
	}
	if iface != "" {
		ifc, err := net.InterfaceByName(iface)
		if err != nil {
			return "", fmt.Errorf("rendezvous: HOROVOD_GLOO_IFACE=%s: %w", iface, err)
		}
		addrs, err := ifc.Addrs()
		if err != nil {
			return "", fmt.Errorf("rendezvous: HOROVOD_GLOO_IFACE=%s: %w", iface, err)
		}
		var v6 string
		for _, a := range addrs {
			n, ok := a.(*net.IPNet)
			if !ok || n.IP.IsLinkLocalUnicast() {
				continue
			}
			if n.IP.To4() != nil {
				return n.IP.String(), nil
			}
			if v6 == "" {
				v6 = n.IP.String()
			}
		}
		if v6 == "" {
			return "", fmt.Errorf("rendezvous: HOROVOD_GLOO_IFACE=%s has no usable address", iface)
		}
		return v6, nil
	}
	// A UDP "connection" only picks the route: no packet is sent.
	c, err := net.Dial("udp", server)
	if err != nil {
		return "", fmt.Errorf("rendezvous: no route to the rendezvous server %s: %w", server, err)
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).IP.String(), nil
}
