"""The check of the candidate's native code, done by the worker from outside the candidate's process.

guard.py's two observers watch the ATen operators of verify's forward from inside the child, where
the extension's C++ runs beside them: it can turn RecordFunction off on its own thread, exclude the
Python dispatch keys, and set both back before it returns, leaving nothing to see
(`binding_disables_record_function`), or call a CPU kernel past the dispatcher (`at::cpu::relu`),
which neither observer ever sees. What native code can reach by name, though, is written in its
shared object: the ELF dynamic symbol table lists every function of torch's it imports, and the
dynamic linker binds nothing else. This module reads that list with a strict ELF64 reader of its
own (no binutils; nothing of the candidate's runs) and judges each name:

- `at::_ops::<op>::call` names one ATen operator overload: judged by guard.op_allowed, the policy of
  both observers, plus guard.LAYOUT_OPS (contiguous, reshape, to: the observers judge those by what
  they run). A denied one is `torch_compute_in_binding`; so are ATen's kernels called past the
  dispatcher (`at::native::`, the operator functions of `at::cpu::`, `at::cuda::` and the composite
  namespaces, `at::cuda::blas::` and its kin) and the graph runners (`torch::jit::`, Inductor's).
- What switches the observers off or goes around them is refused outright, whatever it is used for,
  as `binding_disables_observer`: RecordFunction's switch, guards, TLS and callbacks; the dispatch
  key TLS setters but for ExcludeDispatchKeyGuard (see _SWITCHES); the dispatch mode and Python
  dispatcher TLS; the dispatcher's own calls and every `::redispatch`; the profiler's C++ API; and
  `dlopen`/`dlsym` and their kin, which reach any symbol by a name no table shows.
- A shared object the reader cannot read is `unchecked_native_code` (one line, never a pass).

Two places call it. Before the candidate's child loads anything, the evaluator checks every shared
object of the built module's directory (check_module_dir). After every request, the child's
executable file mappings are compared with those it had before any candidate code ran
(LoadedCode): a shared object loaded some other way (a copy shipped in the solution and imported by
path, a dlopen from code this check has not read) is judged the same way once it shows, and one
mapped from the child's own writable scratch, from a deleted file or a memfd cannot be checked and
is refused. Files of the installation (the Python prefix, site-packages, torch's and the system's
library directories, wherever a library was mapped before the candidate's code) are trusted.

What stays open (docs/ARCHITECTURE.md): native code that finds a function without importing it, by
reading /proc/self/maps or its own link map and a library's symbol table in memory, or that writes
machine code into anonymous executable memory, or issues raw system calls; none of that shows in
any symbol table. A shared object rewritten in place by a process outside the sandbox while it is
mapped is read as it is when the check runs.
"""
import os
import struct

from harness import guard

COMPUTE = "torch_compute_in_binding"
SWITCH = "binding_disables_observer"
UNCHECKED = "unchecked_native_code"

MAX_BYTES = 1 << 30  # a shared object larger than this is refused rather than read
MAX_FILES = 4096  # files looked at under a module directory


class ElfError(ValueError):
    """A file that starts like an ELF object but cannot be read as a shared object the dynamic
    linker would load the way this reader sees it; the message is one line."""


# --- the ELF64 reader --------------------------------------------------------------------------

_EHDR = struct.Struct("<16sHHIQQQIHHHHHH")
_PHDR = struct.Struct("<IIQQQQQQ")
_DYN = struct.Struct("<qQ")
_SYM = struct.Struct("<IBBHQQ")
_U32 = struct.Struct("<I")

_ET_DYN = 3
_MACHINES = {62: "x86-64", 183: "aarch64"}  # the hosts the harness runs on
_PT_LOAD, _PT_DYNAMIC = 1, 2
_PAGE = os.sysconf("SC_PAGE_SIZE")
_PF_W = 2
_DT_NULL, _DT_NEEDED, _DT_PLTRELSZ, _DT_HASH, _DT_STRTAB, _DT_SYMTAB = 0, 1, 2, 4, 5, 6
_DT_RELA, _DT_RELASZ, _DT_RELAENT, _DT_STRSZ, _DT_SYMENT = 7, 8, 9, 10, 11
_DT_REL, _DT_RELSZ, _DT_RELENT, _DT_PLTREL, _DT_TEXTREL, _DT_JMPREL = 17, 18, 19, 20, 22, 23
_DT_FLAGS, _DF_TEXTREL = 30, 0x4
_DT_GNU_HASH, _DT_AUXILIARY, _DT_FILTER = 0x6FFFFEF5, 0x7FFFFFFD, 0x7FFFFFFF
# Tags the loader reads once: a second copy would make this reader and the loader disagree.
_SINGLE = {_DT_PLTRELSZ, _DT_HASH, _DT_STRTAB, _DT_SYMTAB, _DT_RELA, _DT_RELASZ, _DT_RELAENT, _DT_STRSZ,
           _DT_SYMENT, _DT_REL, _DT_RELSZ, _DT_RELENT, _DT_PLTREL, _DT_JMPREL, _DT_FLAGS, _DT_GNU_HASH}
_SHN_UNDEF = 0
_STV_DEFAULT, _STB_LOCAL = 0, 0


class SharedObject:
    """What the dynamic linker reads of one ELF64 little-endian shared object, read as it does: from
    the program headers and the dynamic section, never the section headers (which it ignores and a
    candidate could forge). `imports` holds every symbol name the loader may bind to another object:
    the undefined symbols, and the defined ones a relocation names with default visibility (the
    loader looks those up by name too, and a library earlier in the search order wins). `needed`
    holds the libraries it names (DT_NEEDED, and filtees, which supply its symbols too).

    Strict, so that the loader cannot see more than this reader: every table must lie in the file
    part of a loaded segment that is not writable, with no text relocations (a relocation could
    otherwise rewrite a symbol's name before the loader reads it); loaded segments must not
    overlap; the dynamic section must be where its segment says. Anything else is ElfError."""

    def __init__(self, data, name="shared object"):
        self.data, self.name = data, name
        if len(data) < _EHDR.size:
            raise ElfError(f"{name}: truncated ELF header ({len(data)} bytes)")
        ident, e_type, machine, _, _, phoff, _, _, _, phentsize, phnum, _, _, _ = _EHDR.unpack_from(data)
        if ident[4] != 2 or ident[5] != 1 or ident[6] != 1:
            raise ElfError(f"{name}: not an ELF64 little-endian object (class {ident[4]}, data {ident[5]})")
        if e_type != _ET_DYN:
            raise ElfError(f"{name}: ELF type {e_type}, not a shared object")
        if machine not in _MACHINES:
            raise ElfError(f"{name}: machine {machine}, not one of {', '.join(_MACHINES.values())}")
        if phentsize != _PHDR.size or not 0 < phnum < 0xFFFF:
            raise ElfError(f"{name}: {phnum} program headers of {phentsize} bytes")
        self._check_range(phoff, phnum * _PHDR.size, "the program headers")
        self.loads, dynamic = [], []
        for i in range(phnum):
            p_type, flags, offset, vaddr, _, filesz, memsz, _ = _PHDR.unpack_from(data, phoff + i * _PHDR.size)
            if p_type == _PT_LOAD:
                if filesz > memsz:
                    raise ElfError(f"{name}: a loaded segment holds more of the file than of memory")
                self._check_range(offset, filesz, "a loaded segment")
                self.loads.append((vaddr, memsz, offset, filesz, flags))
            elif p_type == _PT_DYNAMIC:
                dynamic.append((offset, vaddr, filesz))
        self.loads.sort()
        # The loader maps whole pages, a later segment's over an earlier one's: two segments in
        # one page would let the bytes it reads differ from the file's at the offsets read here.
        for (a, a_size, *_), (b, *_) in zip(self.loads, self.loads[1:]):
            if -(-(a + a_size) // _PAGE) * _PAGE > b // _PAGE * _PAGE:
                raise ElfError(f"{name}: loaded segments share a page")
        if len(dynamic) > 1:
            raise ElfError(f"{name}: {len(dynamic)} dynamic segments")
        self.imports, self.needed = frozenset(), ()
        if dynamic:
            self._read_dynamic(*dynamic[0])

    def _check_range(self, offset, size, what):
        if offset < 0 or size < 0 or offset + size > len(self.data):
            raise ElfError(f"{self.name}: {what} lie(s) past the end of the file (truncated?)")

    def _offset(self, vaddr, size, what, read_only=True):
        """The file offset of [vaddr, vaddr + size) as loaded; ElfError where it is not file-backed
        in one loaded segment, or (read_only) that segment is writable."""
        for start, _, offset, filesz, flags in self.loads:
            if start <= vaddr and vaddr + size <= start + filesz:
                if read_only and flags & _PF_W:
                    raise ElfError(f"{self.name}: {what} lie(s) in a writable segment")
                return offset + (vaddr - start)
        raise ElfError(f"{self.name}: {what} lie(s) outside the file's loaded segments")

    def _read_dynamic(self, offset, vaddr, filesz):
        # The loader reads the dynamic section from memory, at its address: that must be the bytes
        # its file offset names.
        if self._offset(vaddr, filesz, "the dynamic section", read_only=False) != offset:
            raise ElfError(f"{self.name}: the dynamic segment's address and file offset disagree")
        tags, needed = {}, []
        for at in range(offset, offset + filesz - _DYN.size + 1, _DYN.size):
            tag, value = _DYN.unpack_from(self.data, at)
            if tag == _DT_NULL:
                break
            if tag in (_DT_NEEDED, _DT_AUXILIARY, _DT_FILTER):
                needed.append(value)
            elif tag == _DT_TEXTREL:
                raise ElfError(f"{self.name}: text relocations (the loader would write into its code and tables)")
            elif tag in _SINGLE:
                if tag in tags:
                    raise ElfError(f"{self.name}: dynamic tag {tag:#x} appears twice")
                tags[tag] = value
        else:
            raise ElfError(f"{self.name}: the dynamic section has no end (DT_NULL)")
        if tags.get(_DT_FLAGS, 0) & _DF_TEXTREL:
            raise ElfError(f"{self.name}: text relocations (the loader would write into its code and tables)")
        for tag, size in ((_DT_SYMENT, _SYM.size), (_DT_RELAENT, 24), (_DT_RELENT, 16)):
            if tag in tags and tags[tag] != size:
                raise ElfError(f"{self.name}: dynamic tag {tag} says {tags[tag]}-byte entries, not {size}")
        strtab = self._offset(tags.get(_DT_STRTAB, 0), tags.get(_DT_STRSZ, 0), "the string table") \
            if _DT_STRTAB in tags else None
        strsz = tags.get(_DT_STRSZ, 0)

        def string(index):
            if strtab is None or index >= strsz:
                raise ElfError(f"{self.name}: a name lies outside the string table")
            end = self.data.find(b"\0", strtab + index, strtab + strsz)
            if end < 0:
                raise ElfError(f"{self.name}: a name in the string table has no end")
            return self.data[strtab + index:end].decode("latin-1")

        self.needed = tuple(string(i) for i in needed)
        referenced = self._relocation_symbols(tags)
        count = max([1 + max(referenced, default=0), self._hash_count(tags)])
        if _DT_SYMTAB not in tags:
            if count > 1:
                raise ElfError(f"{self.name}: relocations name symbols but there is no symbol table")
            return
        symtab = self._offset(tags[_DT_SYMTAB], count * _SYM.size, "the symbol table")
        imports = set()
        for index in range(1, count):
            st_name, info, other, shndx, _, _ = _SYM.unpack_from(self.data, symtab + index * _SYM.size)
            undefined = shndx == _SHN_UNDEF
            # A defined symbol is looked up by name where a relocation names it, unless it is
            # local or hidden/protected: a library earlier in the search order can supply it.
            bound_by_name = index in referenced and info >> 4 != _STB_LOCAL and other & 3 == _STV_DEFAULT
            if (undefined or bound_by_name) and st_name:
                imports.add(string(st_name))
        self.imports = frozenset(imports)

    def _relocation_symbols(self, tags):
        """The symbol indices every relocation table names (RELA, REL and the PLT's)."""
        tables = []
        if _DT_RELA in tags:
            tables.append((tags[_DT_RELA], tags.get(_DT_RELASZ, 0), 24, "the RELA relocations"))
        if _DT_REL in tags:
            tables.append((tags[_DT_REL], tags.get(_DT_RELSZ, 0), 16, "the REL relocations"))
        if _DT_JMPREL in tags:
            kind = tags.get(_DT_PLTREL, _DT_RELA)
            if kind not in (_DT_RELA, _DT_REL):
                raise ElfError(f"{self.name}: PLT relocations of kind {kind}")
            tables.append((tags[_DT_JMPREL], tags.get(_DT_PLTRELSZ, 0), 24 if kind == _DT_RELA else 16,
                           "the PLT relocations"))
        symbols = set()
        for vaddr, size, entry, what in tables:
            if size % entry:
                raise ElfError(f"{self.name}: {what} are not whole entries")
            at = self._offset(vaddr, size, what)
            for info_at in range(at + 8, at + size, entry):  # r_info follows r_offset
                symbol = int.from_bytes(self.data[info_at:info_at + 8], "little") >> 32
                if symbol:
                    symbols.add(symbol)
        return symbols

    def _hash_count(self, tags):
        """How many symbols the hash tables say there are (the loader's lookups stop there)."""
        count = 0
        if _DT_HASH in tags:
            at = self._offset(tags[_DT_HASH], 8, "the hash table")
            count = _U32.unpack_from(self.data, at + 4)[0]  # nchain
        if _DT_GNU_HASH in tags:
            count = max(count, self._gnu_hash_count(tags[_DT_GNU_HASH]))
        return count

    def _gnu_hash_count(self, vaddr):
        header = self._offset(vaddr, 16, "the GNU hash table")
        buckets_n, first, bloom_n, _ = struct.unpack_from("<IIII", self.data, header)
        buckets_vaddr = vaddr + 16 + 8 * bloom_n
        at = self._offset(buckets_vaddr, 4 * buckets_n, "the GNU hash table's buckets")
        last = max(struct.unpack_from(f"<{buckets_n}I", self.data, at), default=0)
        if last < first:
            return first
        chains_vaddr = buckets_vaddr + 4 * buckets_n
        while True:  # the last bucket's chain ends at the entry with its low bit set
            value = _U32.unpack_from(self.data, self._offset(chains_vaddr + 4 * (last - first), 4,
                                                              "the GNU hash table's chains"))[0]
            last += 1
            if value & 1:
                return last


def elf_type(path):
    """None where path is not a regular file (links followed) starting with the ELF magic; else its
    ELF type as a little-endian object reads it (ET_DYN is 3), or -1 where the header is cut short."""
    try:
        with open(path, "rb") as f:
            head = f.read(18)
    except OSError:
        return None
    if head[:4] != b"\x7fELF":
        return None
    return int.from_bytes(head[16:18], "little") if len(head) == 18 else -1


def read_shared_object(path, shown=None):
    """The SharedObject at path (shown: the name for messages); ElfError for one that cannot be
    read, OSError where the file cannot be opened."""
    shown = shown or path
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size > MAX_BYTES:
            raise ElfError(f"{shown}: {size} bytes, more than the {MAX_BYTES} this check reads")
        data = f.read()
    if data[:4] != b"\x7fELF":
        raise ElfError(f"{shown}: not an ELF file")
    return SharedObject(data, shown)


# --- the policy ---------------------------------------------------------------------------------

def scope(symbol):
    """The leading names of an Itanium-mangled C++ symbol: ('at', '_ops', 'relu', 'call') for
    _ZN2at4_ops4relu4callERKNS_6TensorE, ('c10', 'impl', 'ExcludeDispatchKeyGuard') for its
    constructor, ('at', 'TensorBase', 'data_ptr') for a template member. Special names (virtual
    tables, typeinfo, TLS wrappers, guard variables) and local entities give the names they wrap.
    () for a C name or where the first name is not a plain one (std::, a substitution)."""
    if not symbol.startswith("_Z"):
        return ()
    s = symbol[2:]
    if s[:2] in ("TV", "TT", "TI", "TS", "TH", "TW", "GV", "GR"):
        s = s[2:]
    if s.startswith("Z"):  # an entity local to a function: that function's name comes first
        s = s[1:]
    nested = s.startswith("N")
    if nested:
        s = s[1:].lstrip("rVKRO")  # the member function's cv- and ref-qualifiers
    names = []
    while s[:1].isdigit():
        digits = len(s) - len(s.lstrip("0123456789"))
        length = int(s[:digits])
        name, s = s[digits:digits + length], s[digits + length:]
        if len(name) < length:
            return ()
        names.append(name)
        while s.startswith("B") and s[1:2].isdigit():  # an ABI tag ([abi:cxx11]) of the name before
            tag_digits = len(s) - 1 - len(s[1:].lstrip("0123456789"))
            s = s[1 + tag_digits + int(s[1:1 + tag_digits]):]
        if not nested:
            break
    return tuple(names)


# Turns off or goes around an observer; refused whatever the call, by the leading names it starts
# with. c10::impl::ExcludeDispatchKeyGuard is not here: torch::empty and every torch:: factory
# exclude the autograd keys with it (all the shipped CUDA bindings import it), and what it can hide
# from the dispatch mode RecordFunction still sees, whose switches are here.
_SWITCHES = {
    ("at", "enableRecordFunction"): "turns RecordFunction off",
    ("at", "RecordFunctionGuard"): "turns RecordFunction off",
    ("at", "DisableRecordFunctionGuard"): "turns RecordFunction off",
    ("at", "set_record_function_tls_"): "replaces RecordFunction's thread state",
    ("at", "get_record_function_tls_"): "reaches RecordFunction's thread state",
    ("at", "set_record_function_seed_for_testing"): "changes RecordFunction's sampling",
    ("at", "addThreadLocalCallback"): "changes RecordFunction's callbacks",
    ("at", "addGlobalCallback"): "changes RecordFunction's callbacks",
    ("at", "removeCallback"): "removes a RecordFunction callback",
    ("at", "disableCallback"): "disables a RecordFunction callback",
    ("at", "reenableCallback"): "changes RecordFunction's callbacks",
    ("at", "clearCallbacks"): "clears RecordFunction's callbacks",
    ("at", "clearGlobalCallbacks"): "clears RecordFunction's callbacks",
    ("at", "clearThreadLocalCallbacks"): "clears RecordFunction's callbacks",
    ("at", "ThreadLocalState"): "replaces the thread's dispatch and RecordFunction state",
    ("at", "ThreadLocalStateGuard"): "replaces the thread's dispatch and RecordFunction state",
    ("at", "impl", "PythonTorchFunctionTLS"): "changes the torch function mode stack",
    ("at", "impl", "MaybeSetTLSOnEntryGuard"): "changes the Python dispatch state",
    ("at", "impl", "RestorePythonTLSSnapshot"): "changes the Python dispatch keys",
    ("at", "impl", "VmapMode"): "changes the dispatch keys",
    ("at", "functorch"): "changes the dispatch keys (functorch's layers)",
    ("c10", "impl", "IncludeDispatchKeyGuard"): "changes the dispatch keys",
    ("c10", "impl", "_force_tls_local_dispatch_key_set"): "replaces the thread's dispatch keys",
    ("c10", "impl", "tls_set_dispatch_key_excluded"): "changes the dispatch keys",
    ("c10", "impl", "tls_set_dispatch_key_included"): "changes the dispatch keys",
    ("c10", "impl", "raw_local_dispatch_key_set"): "reaches the thread's dispatch keys",
    ("c10", "impl", "TorchDispatchModeTLS"): "changes the dispatch mode stack",
    ("c10", "impl", "PythonDispatcherTLS"): "changes the Python dispatcher",
    ("c10", "impl", "HermeticPyObjectTLS"): "turns the Python key's tensors off",
    ("c10", "Dispatcher"): "calls operators through the dispatcher's own API (redispatch, boxed calls)",
    ("c10", "OperatorHandle"): "calls operators through the dispatcher's own API (redispatch, boxed calls)",
    ("c10", "impl", "OperatorEntry"): "calls an operator's kernel directly",
    ("torch", "autograd", "profiler"): "controls the profiler the operator observer runs",
    ("torch", "profiler"): "controls the profiler and the execution trace",
}
# C functions that reach any symbol by its name at run time, past every table this check reads.
_DYNAMIC_LOOKUP = {"dlopen", "dlmopen", "dlsym", "dlvsym", "dladdr", "dladdr1", "dlinfo", "dl_iterate_phdr",
                   "__libc_dlopen_mode", "__libc_dlsym", "__libc_dlvsym"}
# ATen's generated operator functions, each a kernel called past the dispatcher: at::cpu::relu,
# at::cuda::add_out, at::compositeexplicitautograd::... cpu and cuda hold helpers besides
# (getCurrentCUDAStream, is_avx2_supported), the others nothing but operators.
_KERNEL_NAMESPACES = {"cpu", "cuda", "meta", "mps", "xpu", "compositeexplicitautograd",
                      "compositeexplicitautogradnonfunctional", "compositeimplicitautograd",
                      "compositeimplicitautogradnestedtensor"}
_HELPER_NAMESPACES = {"cpu", "cuda"}
# ATen's compute wrappers under at::cuda:: (cuBLAS, cuSOLVER, cuSPARSE, CUB, the jiterator, TunableOp).
_COMPUTE_SUBNAMESPACES = {"blas", "solver", "sparse", "cub", "jit", "tunable"}
# Graph runners: TorchScript, AOTInductor.
_GRAPH_RUNNERS = {("torch", "jit"), ("torch", "inductor"), ("torch", "aot_inductor")}
_KERNEL_SUFFIXES = ("_symint_outf", "_symint_out", "_outf", "_out", "_symint")


class SymbolPolicy:
    """Judges imported symbol names; built from the operators this torch registers."""

    def __init__(self, op_names=None):
        if op_names is None:
            import torch
            op_names = torch._C._dispatch_get_all_op_names()
        # at::_ops::<struct>: the operator's name, then "_" and the overload's where it has one
        # (torchgen's unambiguous name); aten::add.Scalar is add_Scalar, aten::relu is relu.
        self.structs, self.ops = {}, set()
        for qualified in op_names:
            if qualified.startswith("aten::"):
                name, _, overload = qualified[6:].partition(".")
                self.structs[f"{name}_{overload}" if overload else name] = name
                self.ops.add(name)

    @staticmethod
    def allowed(op):
        """The observers' policy for an operator met by name only (guard.op_allowed), and the
        operators they judge by what they run (guard.LAYOUT_OPS)."""
        return guard.op_allowed(op) or op in guard.LAYOUT_OPS

    def _kernel_op(self, name):
        """The operator an ATen kernel function's name is of (add_out, add_outf, empty_symint), if any."""
        if name in self.ops:
            return name
        for suffix in _KERNEL_SUFFIXES:
            if name.endswith(suffix) and name[:-len(suffix)] in self.ops:
                return name[:-len(suffix)]
        return None

    def judge(self, symbol):
        """(violation, why) for one imported symbol name, or None where it may be imported."""
        if symbol in _DYNAMIC_LOOKUP or symbol.startswith("_dl_"):
            return SWITCH, f"{symbol} (reaches any symbol by name)"
        names = scope(symbol)
        shown = "::".join(names)
        if names[:2] == ("at", "_ops"):
            if len(names) == 4 and names[3] == "redispatch":
                return SWITCH, f"{shown} (redispatches below RecordFunction and the Python key)"
            if len(names) == 4 and names[3] != "call":
                return None  # the struct's name and schema strings
            op = self.structs.get(names[2]) if len(names) == 4 else None
            if op is None:
                return COMPUTE, f"{shown} (an ATen operator this torch does not register)"
            return None if self.allowed(op) else (COMPUTE, f"{shown} (aten::{op})")
        for length in (2, 3):
            if names[:length] in _SWITCHES:
                return SWITCH, f"{shown} ({_SWITCHES[names[:length]]})"
        if names[:2] == ("at", "native"):
            return COMPUTE, f"{shown} (ATen's native kernels, past the dispatcher)"
        if names[:2] in _GRAPH_RUNNERS:
            return COMPUTE, f"{shown} (runs a TorchScript or compiled graph)"
        if len(names) >= 3 and names[0] == "at" and names[1] in _KERNEL_NAMESPACES:
            if names[1] == "cuda" and names[2] in _COMPUTE_SUBNAMESPACES:
                return COMPUTE, f"{shown} (ATen's compute wrappers, past the dispatcher)"
            op = self._kernel_op(names[2])
            if op is not None:
                return None if self.allowed(op) else (COMPUTE, f"{shown} (aten::{op}'s kernel, past the dispatcher)")
            if names[1] not in _HELPER_NAMESPACES:
                return COMPUTE, f"{shown} (an ATen kernel, past the dispatcher)"
            return None
        if len(names) == 2 and names[0] == "at":  # at::full_like and the few operators built out of line
            op = self._kernel_op(names[1])
            if op is not None and not self.allowed(op):
                return COMPUTE, f"{shown} (aten::{op})"
        return None

    def judge_object(self, shared_object):
        """{violation: detail} for one SharedObject: each violation once, with its first symbol and
        how many more there are."""
        found = {}
        for symbol in sorted(shared_object.imports):
            verdict = self.judge(symbol)
            if verdict is not None:  # a constructor and its variants (C1, C2) read the same: once
                found.setdefault(verdict[0], {}).setdefault(verdict[1])
        return {name: f"{shared_object.name} imports {next(iter(whys))}" +
                (f" and {len(whys) - 1} more" if len(whys) > 1 else "") for name, whys in found.items()}


_policy = []


def policy():
    """The worker's SymbolPolicy, built on first use (it lists torch's operators once)."""
    if not _policy:
        _policy.append(SymbolPolicy())
    return _policy[0]


def check_file(path, shown=None):
    """{violation: detail} for the shared object at path; a file that cannot be read as one is
    unchecked_native_code."""
    try:
        return policy().judge_object(read_shared_object(path, shown))
    except (ElfError, OSError) as e:
        detail = str(e) if isinstance(e, ElfError) else f"{shown or path}: cannot be read ({e.strerror})"
        return {UNCHECKED: detail}


def check_module_dir(module_dir):
    """{violation: detail} for every ELF shared object under the built module's directory (the
    extension, and anything beside it the extension or model_new.py could load), before the child
    loads any. A tree too large to look through is refused."""
    found, seen = {}, 0
    for root, dirs, files in os.walk(module_dir):
        dirs.sort()
        for name in sorted(files):
            seen += 1
            if seen > MAX_FILES:
                found.setdefault(UNCHECKED, f"{module_dir}: more than {MAX_FILES} files to look through")
                return found
            path = os.path.join(root, name)
            # Relocatable objects and executables are not what a process loads; anything else
            # that starts like ELF is read, and refused where it cannot be.
            if elf_type(path) not in (None, 1, 2):
                for violation, detail in check_file(path, os.path.relpath(path, module_dir)).items():
                    found.setdefault(violation, detail)
    return found


# --- what the child maps -------------------------------------------------------------------------

def _ld_so_conf_dirs(path="/etc/ld.so.conf", depth=0):
    """The directories the system's loader searches by its configuration (includes followed)."""
    import glob
    dirs = []
    try:
        with open(path) as f:
            lines = [line.split("#", 1)[0].strip() for line in f]
    except OSError:
        return dirs
    for line in lines:
        if line.startswith("include") and depth < 4:
            for pattern in line.split()[1:]:
                pattern = pattern if pattern.startswith("/") else os.path.join(os.path.dirname(path), pattern)
                for included in sorted(glob.glob(pattern)):
                    dirs += _ld_so_conf_dirs(included, depth + 1)
        elif line.startswith("/"):
            dirs.append(line)
    return dirs


def _installation_roots():
    """The directories whose libraries are the installation's, not the candidate's: Python's and
    its packages', torch's, the system loader's (its standard and configured directories, and
    LD_LIBRARY_PATH, which the worker's environment and not the candidate sets) and CUDA's. torch
    and the CUDA driver load libraries from there lazily (cuDNN's parts, NVRTC) after the child
    is ready."""
    import sysconfig
    import torch
    roots = {sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    roots |= {os.path.join(torch.__path__[0], "lib"), "/usr/lib", "/usr/lib64", "/lib", "/lib64", "/usr/local/cuda"}
    roots |= set(_ld_so_conf_dirs())
    roots |= {d for d in os.environ.get("LD_LIBRARY_PATH", "").split(":") if d.startswith("/")}
    roots |= {os.environ[k] for k in ("CUDA_HOME", "CUDA_PATH") if os.environ.get(k, "").startswith("/")}
    return {os.path.realpath(r) for r in roots if r and os.path.realpath(r) != "/"}


def executable_mappings(pid):
    """{(path, deleted)} of the file-backed executable mappings in /proc/PID/maps (raises OSError)."""
    out = set()
    with open(f"/proc/{pid}/maps") as f:
        for line in f:
            fields = line.split(None, 5)
            if len(fields) == 6 and fields[1][2:3] == "x" and fields[5].startswith("/"):
                path = fields[5].rstrip("\n")
                deleted = path.endswith(" (deleted)")
                out.add((path[:-len(" (deleted)")] if deleted else path, deleted))
    return out


def _under(path, roots):
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


class LoadedCode:
    """The child's executable file mappings, from the worker: those there before any candidate
    code ran are the installation's; a shared object mapped since is judged like the module's,
    read through /proc/PID/root (the child's own view of the file system), once per file."""

    def __init__(self, pid, writable_dirs):
        self.pid = pid
        self.writable = [os.path.realpath(d) for d in writable_dirs] + ["/dev/shm"]  # the child's view
        try:
            mapped = executable_mappings(pid)
        except OSError as e:  # before any candidate code: the host's, not the candidate's, failure
            raise RuntimeError(f"harness: cannot read the candidate's process's mappings ({e}); the harness "
                               "reads /proc/PID/maps and /proc/PID/root of its child") from e
        self.before = {path for path, _ in mapped}
        self.judged = set()
        trusted = _installation_roots() | {os.path.dirname(path) for path in self.before}
        self.trusted = {r for r in trusted if not _under(r, self.writable)}

    def new_violations(self):
        """{violation: detail} for what has been mapped since the last call ({} where the child is
        gone: its reply is the last word)."""
        try:
            mapped = executable_mappings(self.pid)
        except OSError as e:
            if not os.path.exists(f"/proc/{self.pid}"):
                return {}
            return {UNCHECKED: f"the child's mappings could not be read ({e.strerror})"}
        found = {}
        for path, deleted in sorted(mapped - self.judged):
            self.judged.add((path, deleted))
            if path in self.before:
                continue
            if deleted or path.startswith("/memfd:"):
                verdict = {UNCHECKED: f"code mapped from {path}, a file that is gone (deleted, or a memfd)"}
            elif _under(path, self.writable):
                verdict = {UNCHECKED: f"code mapped from {path}, in the candidate's own writable scratch"}
            elif _under(path, self.trusted):
                continue
            else:
                verdict = check_file(f"/proc/{self.pid}/root{path}", path)
            for violation, detail in verdict.items():
                found.setdefault(violation, detail)
        return found
