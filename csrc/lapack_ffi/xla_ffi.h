/* XLA's FFI C API, version 0.1: the part of it (xla/ffi/api/c_api.h) that the handlers use.

   A local copy, declared here rather than included from jaxlib, so that building jaxdia
   needs a C compiler and Python's headers only (no jaxlib at build time). The C API is
   ABI-stable and versioned: a handler states the version it was written against (0.1) when
   XLA asks (the metadata extension: answered_metadata in call_frame.c), and XLA keeps
   serving that version. A structure is declared up to the last field used; a new field
   used means a new declaration here, in XLA's order. */

#ifndef JAXDIA_XLA_FFI_H
#define JAXDIA_XLA_FFI_H

#include <stddef.h>
#include <stdint.h>

typedef struct XLA_FFI_Extension_Base {
    size_t struct_size;
    int type;
    struct XLA_FFI_Extension_Base *next;
} XLA_FFI_Extension_Base;

typedef struct {
    size_t struct_size;
    XLA_FFI_Extension_Base *extension_start;
    int major_version;
    int minor_version;
} XLA_FFI_Api_Version;

typedef struct XLA_FFI_Error XLA_FFI_Error; /* opaque */

typedef struct {
    size_t struct_size;
    XLA_FFI_Extension_Base *extension_start;
    const char *message;
    int errc;
} XLA_FFI_Error_Create_Args;

typedef struct {
    size_t struct_size;
    XLA_FFI_Extension_Base *extension_start;
    XLA_FFI_Api_Version api_version;
    const void *internal_api;
    XLA_FFI_Error *(*XLA_FFI_Error_Create)(XLA_FFI_Error_Create_Args *args);
    /* ... further functions, not used */
} XLA_FFI_Api;

typedef struct {
    size_t struct_size;
    XLA_FFI_Api_Version api_version;
    uint32_t traits;
    /* ... fields of later versions, left as XLA set them */
} XLA_FFI_Metadata;

typedef struct {
    XLA_FFI_Extension_Base extension_base;
    XLA_FFI_Metadata *metadata;
} XLA_FFI_Metadata_Extension;

typedef struct {
    size_t struct_size;
    XLA_FFI_Extension_Base *extension_start;
    int dtype;
    void *data;
    int64_t rank;
    int64_t *dims;
} XLA_FFI_Buffer;

typedef struct { /* XLA_FFI_Args and XLA_FFI_Rets */
    size_t struct_size;
    XLA_FFI_Extension_Base *extension_start;
    int64_t size;
    int *types;
    void **items;
} XLA_FFI_List;

typedef struct {
    const char *ptr;
    size_t len;
} XLA_FFI_ByteSpan;

typedef struct {
    int dtype;
    void *value;
} XLA_FFI_Scalar;

typedef struct {
    size_t struct_size;
    XLA_FFI_Extension_Base *extension_start;
    int64_t size;
    int *types;
    XLA_FFI_ByteSpan **names;
    void **attrs;
} XLA_FFI_Attrs;

typedef struct {
    size_t struct_size;
    XLA_FFI_Extension_Base *extension_start;
    const XLA_FFI_Api *api;
    void *ctx;
    int stage;
    XLA_FFI_List args;
    XLA_FFI_List rets;
    XLA_FFI_Attrs attrs;
    void *future;
} XLA_FFI_CallFrame;

/* A handler: what XLA calls, with the call frame of one custom call. */
typedef XLA_FFI_Error *XLA_FFI_Handler(XLA_FFI_CallFrame *frame);

enum {
    EXTENSION_METADATA = 1,
    STAGE_EXECUTE = 3,
    BUFFER = 1, /* XLA_FFI_ArgType_BUFFER, XLA_FFI_RetType_BUFFER */
    ATTRIBUTE_SCALAR = 3,
    ERROR_INVALID_ARGUMENT = 3,
    ERROR_RESOURCE_EXHAUSTED = 8,
    ERROR_UNIMPLEMENTED = 12,
    ERROR_INTERNAL = 13,
    /* XLA_FFI_DataType */
    S32 = 4,
    S64 = 5,
    F32 = 11,
    F64 = 12,
    C64 = 15,
    C128 = 18,
};

#endif
