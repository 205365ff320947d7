// Package kfaketest runs in-process kfake clusters for tests and programs.
package kfaketest
