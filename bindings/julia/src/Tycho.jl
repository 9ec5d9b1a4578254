"""
    Tycho

Julia bindings of tycho (ptychographic reconstruction) over libtycho's C API
(`abi/tycho/tycho.h`): one `@ccall` wrapper per C function (`tycho_*`, same names and
arguments), a [`Session`](@ref) that frees itself, and result arrays wrapped from the C API's
DLPack tensors without a copy.

libtycho is `ENV["TYCHO_LIBRARY"]` when this module is loaded (precompiled), else
`libtycho.so.1` through the dynamic loader (`LD_LIBRARY_PATH`, an installed prefix). It finds
its plugins beside itself. Use a session from one task at a time.
"""
module Tycho

export Session, run!, result, result_raw, save, rank, world_size, barrier, evaluate, TychoError

const libtycho = get(ENV, "TYCHO_LIBRARY", "libtycho.so.1")

# ---------------------------------------------------------------- C structs (layouts as in C)

"`DLDevice` of DLPack 0.6."
struct DLDevice
    device_type::Cint  # kDLCPU = 1
    device_id::Cint
end

"`DLDataType` of DLPack 0.6: `code` 0 int, 1 uint, 2 float, 5 complex; `bits` per lane."
struct DLDataType
    code::UInt8
    bits::UInt8
    lanes::UInt16
end

"`DLTensor` of DLPack 0.6 (row-major when `strides` is NULL)."
struct DLTensor
    data::Ptr{Cvoid}
    device::DLDevice
    ndim::Cint
    dtype::DLDataType
    shape::Ptr{Int64}
    strides::Ptr{Int64}
    byte_offset::UInt64
end

"`DLManagedTensor` of DLPack 0.6: the owner calls `deleter(self)` once."
struct DLManagedTensor
    dl_tensor::DLTensor
    manager_ctx::Ptr{Cvoid}
    deleter::Ptr{Cvoid}
end

"`tycho_progress`: after each iteration (both counters over the session's life)."
struct Progress
    struct_size::UInt32
    iteration::Int64         # 1-based
    iterations_total::Int64  # the iteration this run call ends at
    loss::Cdouble            # mean loss per pattern of this iteration
    seconds::Cdouble         # wall time of this iteration, s
end

"`tycho_session_options` (for `tycho_session_create_ex`)."
struct SessionOptions
    struct_size::UInt32
    base_dir::Ptr{UInt8}            # NULL: the current folder
    overrides::Ptr{Ptr{UInt8}}      # "key=value" strings, as `--set`
    n_overrides::Int64
    communicator::Ptr{Cvoid}        # an MPI_Comm* or ncclComm_t*; NULL: the launcher decides
end

"`tycho_evaluate_options` (for `tycho_evaluate`); a field left 0 takes its default."
struct EvaluateOptions
    struct_size::UInt32
    sigma_A::Cdouble              # σ of the local-phase Gaussian, Å (0: 2)
    fov_fraction::Cdouble         # inner fraction of the scanned field of view (0: 0.8)
    slice_thickness_A::Cdouble    # depth of each slice, Å (0: the result's own)
end

const TYCHO_OK = Cint(0)
const TYCHO_ERR_CANCELLED = Cint(8)
const TYCHO_SAVE_NEW = Cint(0)
const TYCHO_SAVE_OVERWRITE = Cint(1)

# ---------------------------------------------------------------- the C API, one wrapper each

tycho_abi_version() = @ccall libtycho.tycho_abi_version()::UInt32
tycho_version() = @ccall libtycho.tycho_version()::Cstring
tycho_status_string(status) = @ccall libtycho.tycho_status_string(status::Cint)::Cstring
tycho_last_error() = @ccall libtycho.tycho_last_error()::Cstring
tycho_session_create(toml_text, base_dir, out) = @ccall libtycho.tycho_session_create(toml_text::Cstring, base_dir::Ptr{UInt8}, out::Ptr{Ptr{Cvoid}})::Cint
tycho_session_run(session, iterations, progress, user_data) = @ccall libtycho.tycho_session_run(session::Ptr{Cvoid}, iterations::Int64, progress::Ptr{Cvoid}, user_data::Ptr{Cvoid})::Cint
tycho_session_get(session, name, out) = @ccall libtycho.tycho_session_get(session::Ptr{Cvoid}, name::Cstring, out::Ptr{Ptr{DLManagedTensor}})::Cint
tycho_session_save(session, path, mode) = @ccall libtycho.tycho_session_save(session::Ptr{Cvoid}, path::Cstring, mode::Cint)::Cint
tycho_session_destroy(session) = @ccall libtycho.tycho_session_destroy(session::Ptr{Cvoid})::Cvoid
tycho_session_create_ex(toml_text, options, out) = @ccall libtycho.tycho_session_create_ex(toml_text::Cstring, options::Ptr{SessionOptions}, out::Ptr{Ptr{Cvoid}})::Cint
tycho_session_rank(session) = @ccall libtycho.tycho_session_rank(session::Ptr{Cvoid})::Int32
tycho_session_world_size(session) = @ccall libtycho.tycho_session_world_size(session::Ptr{Cvoid})::Int32
tycho_session_barrier(session) = @ccall libtycho.tycho_session_barrier(session::Ptr{Cvoid})::Cint
tycho_shutdown() = @ccall libtycho.tycho_shutdown()::Cvoid
tycho_evaluate(result_path, truth_path, options, json) = @ccall libtycho.tycho_evaluate(result_path::Cstring, truth_path::Cstring, options::Ptr{EvaluateOptions}, json::Ptr{Ptr{UInt8}})::Cint
tycho_free_string(text) = @ccall libtycho.tycho_free_string(text::Ptr{UInt8})::Cvoid

# ---------------------------------------------------------------- errors

"A failed tycho call: `status` (`tycho_status`), its `name` and tycho's `message`."
struct TychoError <: Exception
    status::Cint
    name::String
    message::String
end
Base.showerror(io::IO, e::TychoError) = print(io, e.name, ": ", e.message)

function check(status::Cint)
    status == TYCHO_OK && return nothing
    throw(TychoError(status, unsafe_string(tycho_status_string(status)), unsafe_string(tycho_last_error())))
end

version() = unsafe_string(tycho_version())
abi_version() = tycho_abi_version()

# ---------------------------------------------------------------- sessions

"""
    Session(toml_text; base_dir=nothing, overrides=String[])
    Session(f, toml_text; ...)            # do-block: closed after f
    session_from_file(path; overrides=String[])

A reconstruction session: validates the TOML configuration, reads the data, prepares the
engine. `base_dir` resolves relative input paths (nothing: the current folder); `overrides` are
`"key=value"` strings, as `tycho reconstruct --set`. Freed by `close(s)` or its finalizer.
Throws [`TychoError`](@ref) with tycho's message (naming the file or key at fault).
"""
mutable struct Session
    handle::Ptr{Cvoid}
end

function Session(toml_text::AbstractString; base_dir::Union{Nothing,AbstractString}=nothing,
                 overrides::AbstractVector{<:AbstractString}=String[])
    out = Ref{Ptr{Cvoid}}(C_NULL)
    strs = String[String(o) for o in overrides]
    ptrs = Ptr{UInt8}[pointer(x) for x in strs]
    dir = base_dir === nothing ? nothing : String(base_dir)
    GC.@preserve strs ptrs dir begin
        opts = Ref(SessionOptions(UInt32(sizeof(SessionOptions)),
                                  dir === nothing ? Ptr{UInt8}(C_NULL) : pointer(dir),
                                  isempty(ptrs) ? Ptr{Ptr{UInt8}}(C_NULL) : pointer(ptrs),
                                  Int64(length(ptrs)), C_NULL))
        check(tycho_session_create_ex(String(toml_text), opts, out))
    end
    return finalizer(close, Session(out[]))
end

function Session(f::Function, toml_text::AbstractString; kwargs...)
    s = Session(toml_text; kwargs...)
    try
        return f(s)
    finally
        close(s)
    end
end

"A session from a TOML file; its relative input paths resolve against the file's folder."
session_from_file(path::AbstractString; overrides::AbstractVector{<:AbstractString}=String[]) =
    Session(read(path, String); base_dir=dirname(abspath(path)), overrides=overrides)

function Base.close(s::Session)
    if s.handle != C_NULL
        tycho_session_destroy(s.handle)
        s.handle = C_NULL
    end
    return nothing
end

function handle(s::Session)
    s.handle == C_NULL && throw(ArgumentError("this tycho session was closed"))
    return s.handle
end

mutable struct ProgressState
    callback::Any
    error::Any
end

function progress_trampoline(p::Ptr{Progress}, user::Ptr{Cvoid})::Cint
    state = unsafe_pointer_to_objref(user)::ProgressState
    try
        return state.callback(unsafe_load(p)) === false ? Cint(1) : Cint(0)
    catch err
        state.error = err
        return Cint(1)
    end
end

"""
    run!(s, iterations=0; progress=nothing) -> s

Runs `iterations` more iterations (0: the configured `[reconstruct] iterations`).
`progress(p::Progress)` is called after each; returning `false` stops the run (what was
computed is kept, no error); an exception it throws stops the run and is rethrown.
"""
function run!(s::Session, iterations::Integer=0; progress=nothing)
    if progress === nothing
        check(tycho_session_run(handle(s), Int64(iterations), C_NULL, C_NULL))
        return s
    end
    state = ProgressState(progress, nothing)
    cb = @cfunction(progress_trampoline, Cint, (Ptr{Progress}, Ptr{Cvoid}))
    status = GC.@preserve state tycho_session_run(handle(s), Int64(iterations), cb, pointer_from_objref(state))
    state.error === nothing || throw(state.error)
    status == TYCHO_ERR_CANCELLED || check(status)
    return s
end

# ---------------------------------------------------------------- results without a copy

function julia_eltype(dt::DLDataType)
    dt.lanes == 1 || error("tycho: a DLPack dtype with $(dt.lanes) lanes")
    key = (dt.code, dt.bits)
    key == (0x02, 0x20) && return Float32
    key == (0x02, 0x40) && return Float64
    key == (0x05, 0x40) && return ComplexF32
    key == (0x05, 0x80) && return ComplexF64
    key == (0x01, 0x08) && return UInt8
    key == (0x01, 0x10) && return UInt16
    key == (0x00, 0x40) && return Int64
    error("tycho: DLPack dtype code $(dt.code), $(dt.bits) bits has no Julia type here")
end

"""
    unsafe_wrap_dlpack(p::Ptr{DLManagedTensor}) -> Array

The tensor's memory as a Julia `Array` without a copy; the array owns the tensor (its
finalizer calls the DLPack deleter). C's row-major (d1, ..., dn) becomes the column-major
(dn, ..., d1): element [i1, ..., in] in C is `a[in, ..., i1]`.
"""
function unsafe_wrap_dlpack(p::Ptr{DLManagedTensor})
    m = unsafe_load(p)
    t = m.dl_tensor
    if t.device.device_type != 1 || t.strides != C_NULL
        ccall(m.deleter, Cvoid, (Ptr{DLManagedTensor},), p)
        error("tycho: only compact host (kDLCPU) tensors are wrapped")
    end
    T = julia_eltype(t.dtype)
    cdims = ntuple(i -> Int(unsafe_load(t.shape, i)), Int(t.ndim))
    a = unsafe_wrap(Array, Ptr{T}(t.data + t.byte_offset), reverse(cdims); own=false)
    deleter = m.deleter
    finalizer(_ -> ccall(deleter, Cvoid, (Ptr{DLManagedTensor},), p), a)
    return a
end

"""
    result_raw(s, name) -> Array

A result array, zero copy, in Julia's column-major order (dimensions reversed from C's and
numpy's): "object" (W, H, slices), "probe" (N1, N0, modes), complex; "positions_px" and
"positions_A" (2, P) Float64 (pixels, Å); "loss_history" (iterations,) Float64; "mask"
(N1, N0) UInt8; "optimizer.<object|probe>.<array>".
"""
function result_raw(s::Session, name::AbstractString)
    out = Ref{Ptr{DLManagedTensor}}(C_NULL)
    check(tycho_session_get(handle(s), String(name), out))
    return unsafe_wrap_dlpack(out[])
end

"""
    result(s, name) -> AbstractArray

As [`result_raw`](@ref), indexed in C's and numpy's order through a `PermutedDimsArray` (still
no copy): `result(s, "object")[slice, y, x]`, `result(s, "positions_px")[p, axis]`.
"""
function result(s::Session, name::AbstractString)
    a = result_raw(s, name)
    n = ndims(a)
    return n <= 1 ? a : PermutedDimsArray(a, ntuple(i -> n + 1 - i, n))
end

"""
    save(s, path; overwrite=false)

Saves the result (arrays + manifest) atomically; an existing file is an error unless `overwrite`.
"""
save(s::Session, path::AbstractString; overwrite::Bool=false) =
    check(tycho_session_save(handle(s), String(path), overwrite ? TYCHO_SAVE_OVERWRITE : TYCHO_SAVE_NEW))

"This session's rank in [0, world_size) (0 without a launcher)."
rank(s::Session) = Int(tycho_session_rank(handle(s)))
"The number of ranks (1 without a launcher)."
world_size(s::Session) = Int(tycho_session_world_size(handle(s)))
"Returns when every rank's session has called it."
barrier(s::Session) = check(tycho_session_barrier(handle(s)))

# ---------------------------------------------------------------- accuracy against a truth

"""
    evaluate(result, truth; sigma_A=0, fov_fraction=0, slice_thickness_A=0) -> String

The accuracy of a saved result file against a ground truth (.npz), as `tycho evaluate` prints
it: JSON text with `pearson`, `rms_rad`, per-depth figures and `positions_rms_A` (parse it with
JSON.jl). 0 keeps an option's default (σ 2 Å, the inner 0.8 of the field of view, the result's
own slice thickness). Throws [`TychoError`](@ref) naming the file, array or option at fault.
"""
function evaluate(result::AbstractString, truth::AbstractString; sigma_A::Real=0, fov_fraction::Real=0,
                  slice_thickness_A::Real=0)
    options = Ref(EvaluateOptions(UInt32(sizeof(EvaluateOptions)), sigma_A, fov_fraction, slice_thickness_A))
    out = Ref{Ptr{UInt8}}(C_NULL)
    check(tycho_evaluate(String(result), String(truth), options, out))
    try
        return unsafe_string(out[])
    finally
        tycho_free_string(out[])
    end
end

end # module
