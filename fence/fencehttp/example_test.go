package fencehttp_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/leasefence/leasefence/fence"
	"github.com/leasefence/leasefence/fence/fencehttp"
)

func ExampleHandler() {
	guard := fence.NewMemory(fence.AtLeast)
	jobs := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "done") })
	srv := httptest.NewServer(fencehttp.Handler(jobs, fencehttp.WithGuard(guard)))
	defer srv.Close()

	hc := &http.Client{Transport: &fencehttp.Transport{}}
	send := func(tok uint64) {
		ctx := fence.NewContext(context.Background(), fence.Token{Scope: "jobs/42", Value: tok})
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/jobs/42", nil)
		resp, err := hc.Do(req)
		if err != nil {
			panic(err)
		}
		defer resp.Body.Close()
		fmt.Println(resp.StatusCode, fencehttp.ResponseError(resp))
	}
	send(72)
	send(71)
	// Output:
	// 200 <nil>
	// 409 fence: stale token: scope "jobs/42" presented 71, highest accepted 72
}
