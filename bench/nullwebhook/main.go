// Command nullwebhook is the floor mountwarden's admission webhook is measured against: a
// minimal HTTPS validating webhook that reads each AdmissionReview and allows it.
//
// Usage: nullwebhook -listen 127.0.0.1:0 -cert tls.crt -key tls.key
// It prints "listening on HOST:PORT" on stdout once it accepts connections.
//
// It does what any webhook must and nothing more: decode the review (the API server sends the
// whole object), answer with its uid and allowed: true. Only the standard library, so the
// floor is Go's own HTTP and TLS, as a webhook written in Go with client-go's types would have.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
)

type review struct {
	APIVersion string    `json:"apiVersion"`
	Kind       string    `json:"kind"`
	Request    *request  `json:"request,omitempty"`
	Response   *response `json:"response,omitempty"`
}

type request struct {
	UID    string          `json:"uid"`
	Object json.RawMessage `json:"object"`
}

type response struct {
	UID     string `json:"uid"`
	Allowed bool   `json:"allowed"`
}

func allow(w http.ResponseWriter, r *http.Request) {
	var in review
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil || in.Request == nil {
		http.Error(w, "expected an AdmissionReview with a request", http.StatusBadRequest)
		return
	}
	var object map[string]any // a webhook reads the object it judges
	if err := json.Unmarshal(in.Request.Object, &object); err != nil {
		http.Error(w, "the request's object is not JSON", http.StatusBadRequest)
		return
	}
	out := review{APIVersion: in.APIVersion, Kind: in.Kind, Response: &response{UID: in.Request.UID, Allowed: true}}
	w.Header().Set("Content-Type", "application/json")
	if err := json.NewEncoder(w).Encode(out); err != nil {
		log.Printf("writing the response: %v", err)
	}
}

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "address to listen on")
	cert := flag.String("cert", "", "TLS certificate (PEM)")
	key := flag.String("key", "", "TLS private key (PEM)")
	flag.Parse()
	if *cert == "" || *key == "" {
		fmt.Fprintln(os.Stderr, "nullwebhook: -cert and -key are required")
		os.Exit(2)
	}
	listener, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatalf("nullwebhook: %v", err)
	}
	fmt.Printf("listening on %s\n", listener.Addr())
	os.Stdout.Sync()
	log.Fatal(http.ServeTLS(listener, http.HandlerFunc(allow), *cert, *key))
}
