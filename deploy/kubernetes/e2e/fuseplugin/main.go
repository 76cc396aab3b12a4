// Command fuseplugin is the test cluster's device plugin: it offers the
// node's /dev/fuse to the kubelet as the extended resource
// smarter-devices/fuse, the name smarter-device-manager gives it and the
// one deploy/kubernetes asks for. A real cluster runs smarter-device-manager
// itself (deploy/kubernetes/device-plugin.yaml); its image cannot be pulled
// here (no registry) nor its module fetched (the Go proxy serves it no
// tagged version), so the e2e test runs this stand-in, which speaks the
// same kubelet API (deviceplugin/v1beta1) and nothing more.
//
//	fuseplugin -dir /var/lib/kubelet/device-plugins -devices 10
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// fuseDevices hands out /dev/fuse: every device ID is the same node, as
// FUSE connections are made per open, not per device.
type fuseDevices struct {
	pluginapi.UnimplementedDevicePluginServer
	count int
}

func (p *fuseDevices) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return &pluginapi.DevicePluginOptions{}, nil
}

func (p *fuseDevices) ListAndWatch(_ *pluginapi.Empty, stream grpc.ServerStreamingServer[pluginapi.ListAndWatchResponse]) error {
	devices := make([]*pluginapi.Device, p.count)
	for i := range devices {
		devices[i] = &pluginapi.Device{ID: fmt.Sprintf("fuse%d", i), Health: pluginapi.Healthy}
	}
	if err := stream.Send(&pluginapi.ListAndWatchResponse{Devices: devices}); err != nil {
		return err
	}
	<-stream.Context().Done()
	return nil
}

func (p *fuseDevices) Allocate(_ context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	resp := &pluginapi.AllocateResponse{}
	for range req.ContainerRequests {
		resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerAllocateResponse{
			Devices: []*pluginapi.DeviceSpec{{ContainerPath: "/dev/fuse", HostPath: "/dev/fuse", Permissions: "rw"}},
		})
	}
	return resp, nil
}

func main() {
	dir := flag.String("dir", pluginapi.DevicePluginPath, "the kubelet's device-plugin directory")
	count := flag.Int("devices", 10, "how many containers may hold /dev/fuse at once")
	resource := flag.String("resource", "smarter-devices/fuse", "the extended resource's name")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := serve(ctx, *dir, *resource, *count); err != nil && !errors.Is(err, context.Canceled) {
		log.Fatal(err)
	}
}

// serve offers the devices until ctx ends or the kubelet goes away (it
// removes the plugins' sockets when it restarts; the test's cluster does
// not restart it, so the plugin ends then rather than re-registering).
func serve(ctx context.Context, dir, resource string, count int) error {
	sock := filepath.Join(dir, "awcp-fuse.sock")
	if err := os.Remove(sock); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	l, err := net.Listen("unix", sock)
	if err != nil {
		return err
	}
	srv := grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(srv, &fuseDevices{count: count})
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()
	defer func() {
		srv.Stop()
		<-served
		os.Remove(sock)
	}()

	for {
		err := register(ctx, dir, resource, filepath.Base(sock))
		if err == nil {
			break
		}
		log.Printf("registering with the kubelet: %v; again in 2 s", err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(2 * time.Second):
		}
	}
	log.Printf("offering %d of %s", count, resource)
	tick := time.NewTicker(2 * time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-served:
			return fmt.Errorf("serving: %w", err)
		case <-tick.C:
			if _, err := os.Stat(sock); err != nil {
				return fmt.Errorf("the kubelet removed %s (it restarted)", sock)
			}
		}
	}
}

func register(ctx context.Context, dir, resource, endpoint string) error {
	conn, err := grpc.NewClient("unix://"+filepath.Join(dir, "kubelet.sock"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err = pluginapi.NewRegistrationClient(conn).Register(ctx, &pluginapi.RegisterRequest{
		Version: pluginapi.Version, Endpoint: endpoint, ResourceName: resource})
	return err
}
