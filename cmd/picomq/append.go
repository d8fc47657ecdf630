package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/picomq/picomq/broker/client"
	"github.com/picomq/picomq/broker/stream"
)

// appendBatch is how many lines one append request carries.
const appendBatch = 1000

func (a *app) appendCommand() *cobra.Command {
	var (
		file, key, contentType string
		whole, create          bool
		part                   partitionFlag
		prod                   client.Producer
		streamSeq              string
	)
	cmd := &cobra.Command{
		Use:   "append NAME",
		Short: "append records: one per line of stdin (or --file), or the whole input as one (--whole)",
		Long: "append sends each line of its input (stdin, or --file) as a record, in batches of up to 1000 lines.\n" +
			"With --producer-id the input is one batch, appended idempotently at --producer-epoch/--producer-seq:\n" +
			"sent again, it is acknowledged as a duplicate and not written twice. --stream-seq also makes the input one batch.",
		Args: exactArgs(1, "a stream name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			idempotent := prod.ID != ""
			if !idempotent && (cmd.Flags().Changed("producer-epoch") || cmd.Flags().Changed("producer-seq")) {
				return usagef("--producer-epoch and --producer-seq need --producer-id")
			}
			if contentType != "" && !create {
				return usagef("--content-type is the content type of a stream --create makes")
			}
			in := a.in
			if file != "" {
				f, err := os.Open(file)
				if err != nil {
					return usagef("--file: %v", err)
				}
				defer f.Close()
				in = f
			}
			batches, err := readRecords(in, []byte(key), whole)
			if err != nil {
				return err
			}
			if (idempotent || streamSeq != "") && len(batches) > 1 {
				// One producer seq, or one Stream-Seq, names one batch.
				var all []stream.RecordValue
				for _, b := range batches {
					all = append(all, b...)
				}
				batches = [][]stream.RecordValue{all}
			}
			if len(batches) == 0 {
				return usagef("nothing to append: the input is empty")
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			// --timeout bounds each request, not the whole input.
			octx, cancel := a.call(cmd.Context())
			var s *client.Stream
			if create {
				s, err = c.Open(octx, args[0], client.StreamConfig{ContentType: contentType})
			} else {
				s, err = c.Stream(octx, args[0])
			}
			cancel()
			if err != nil {
				return err
			}
			o := client.AppendOptions{StreamSeq: streamSeq}
			if part.set {
				o.Partition = &part.n
			}
			if idempotent {
				o.Producer = &prod
			}
			var results []client.AppendResult
			for _, b := range batches {
				actx, acancel := a.call(cmd.Context())
				res, err := s.AppendWith(actx, b, o)
				acancel()
				if err != nil {
					// What was acknowledged before stays written: say so
					// before the refusal, so that a retry can skip it.
					return errors.Join(a.printAppends(results), err)
				}
				results = append(results, res)
			}
			return a.printAppends(results)
		},
	}
	f := cmd.Flags()
	f.StringVarP(&file, "file", "f", "", "read the records from this file instead of stdin")
	f.BoolVar(&whole, "whole", false, "the whole input is one record (binary data, a JSON document)")
	f.StringVarP(&key, "key", "k", "", "every record's key: records of one key go to one partition, in order")
	f.VarP(&part, "partition", "p", "append to this partition (default: by key, or round-robin)")
	f.StringVar(&prod.ID, "producer-id", "", "an idempotent producer's id")
	f.Int64Var(&prod.Epoch, "producer-epoch", 0, "the producer's epoch")
	f.Int64Var(&prod.Seq, "producer-seq", 0, "the batch's sequence number for this producer")
	f.StringVar(&streamSeq, "stream-seq", "", "a Stream-Seq above the last one accepted")
	f.BoolVar(&create, "create", false, "create the stream first when it does not exist")
	f.StringVar(&contentType, "content-type", "", "with --create: the new stream's content type")
	return cmd
}

// readRecords reads in as batches of records under key: a line each (the
// newline dropped), or the whole input as one record.
func readRecords(in io.Reader, key []byte, whole bool) ([][]stream.RecordValue, error) {
	if len(key) == 0 {
		key = nil
	}
	if whole {
		b, err := io.ReadAll(in)
		if err != nil {
			return nil, fmt.Errorf("read the input: %w", err)
		}
		return [][]stream.RecordValue{{{Key: key, Payload: b}}}, nil
	}
	var batches [][]stream.RecordValue
	var cur []stream.RecordValue
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	for sc.Scan() {
		cur = append(cur, stream.RecordValue{Key: key, Payload: append([]byte(nil), sc.Bytes()...)})
		if len(cur) == appendBatch {
			batches = append(batches, cur)
			cur = nil
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read the input: %w", err)
	}
	if len(cur) > 0 {
		batches = append(batches, cur)
	}
	return batches, nil
}

// appendView is one acknowledged batch as -o json prints it.
type appendView struct {
	Partition int    `json:"partition"`
	First     uint64 `json:"first"`
	Last      uint64 `json:"last"`
	Next      uint64 `json:"next"`
	Duplicate bool   `json:"duplicate,omitempty"`
}

func (a *app) printAppends(results []client.AppendResult) error {
	views := make([]appendView, 0, len(results))
	for _, r := range results {
		views = append(views, appendView{Partition: r.Partition, First: uint64(r.First), Last: uint64(r.Last), Next: uint64(r.Next), Duplicate: r.Duplicate})
	}
	if a.output == "json" {
		return a.json(views)
	}
	for _, v := range views {
		note := ""
		if v.Duplicate {
			note = " (a duplicate: acknowledged before, not written again)"
		}
		n := v.Last - v.First + 1
		word := "records"
		if n == 1 {
			word = "record"
		}
		if _, err := fmt.Fprintf(a.out, "appended %d %s to partition %d at offsets %d..%d%s\n", n, word, v.Partition, v.First, v.Last, note); err != nil {
			return err
		}
	}
	return nil
}
