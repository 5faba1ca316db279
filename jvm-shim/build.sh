#!/usr/bin/env bash
# Build the barriered state store provider from source with the JDK and the jars that the
# installed pyspark ships (no Maven, no download). Usage: jvm-shim/build.sh [PYTHON] [OUT_JAR]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
python="${1:-python3}"
out="${2:-$here/../python/barriered/jars/barriered-shim.jar}"
command -v javac >/dev/null || { echo "jvm-shim: javac (JDK 17) is required" >&2; exit 1; }
pyspark_home="$("$python" -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))')"
spark_version="$("$python" -c 'import pyspark; print(pyspark.__version__)')"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/classes/io/barriered/shim"
javac --release 17 -nowarn -XDsuppressNotes -cp "$pyspark_home/jars/*" -d "$work/classes" \
  $(find "$here/src" -name '*.java' | sort)
printf 'spark.version=%s\n' "$spark_version" > "$work/classes/io/barriered/shim/build.properties"
mkdir -p "$(dirname "$out")"
jar cf "$out.tmp" -C "$work/classes" .
mv "$out.tmp" "$out"
echo "jvm-shim: built $out for Spark $spark_version"
