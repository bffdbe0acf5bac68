#!/usr/bin/env bash
# Regenerates core/gen/ (protobuf-c code for envd's messages) from proto/envd/*.proto with
# Debian's protoc-c. The generated files are committed so that every build (CMake, the rock)
# compiles them without the generator; scripts/test.sh checks that they match the .proto files.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-core/gen}
rm -rf "$out/envd"
mkdir -p "$out"
protoc-c --c_out="$out" -Iproto proto/envd/process.proto proto/envd/filesystem.proto
