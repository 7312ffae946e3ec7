# Shared setup of the bench/*.sh scripts (sourced, from the repository root).
# bench_setup PRESET DRIVER: build hyla and build/bench/DRIVER, make sure the bench model
# build/bench-models/PRESET exists (hyla init, seed 5), set MODEL to it and export
# OMP_NUM_THREADS=$THREADS.
bench_setup() {
    make -j"$(nproc)" build/hyla "build/bench/$2" >/dev/null
    MODEL=build/bench-models/$1
    [ -f "$MODEL/model.safetensors" ] || { rm -rf "$MODEL"; ./build/hyla init --preset "$1" --seed 5 --out "$MODEL" >/dev/null; }
    export OMP_NUM_THREADS=$THREADS
}
