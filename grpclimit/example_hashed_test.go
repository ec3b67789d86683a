package grpclimit_test

import (
	"context"
	"fmt"

	"google.golang.org/grpc/metadata"

	"github.com/sluicehq/sluice/grpclimit"
)

// Key by an API key the client sends in its metadata, hashed: the secret
// stays out of the store's keys, and the key's length is bounded.
func ExampleHashed() {
	key := grpclimit.Hashed(grpclimit.Metadata("x-api-key"))
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("x-api-key", "s3cr3t"))
	fmt.Println(key(ctx, "/shop.v1.Orders/Get"))
	_, err := key(context.Background(), "/shop.v1.Orders/Get")
	fmt.Println(err != nil)
	// Output:
	// #hY_5KF-4eMGUdT9liRArJ77gwPDZ2tpe2jl-W_sY97g <nil>
	// true
}
