# Option types. Each type says what a value may be (`check`), how it reads in
# JSON Schema 2020-12 (`schema`, with the named definitions it brings in
# `defs`), how a configuration value is completed with defaults (`merge`), and
# what it holds (`nested`, for walkers such as the renames harvester).
{ util, options }:
let
  inherit (builtins)
    all attrNames concatMap elem floor genList isAttrs isBool isFloat isInt isList isString
    length match mapAttrs substring stringLength typeOf;
  inherit (util) filterAttrs mapAttrsToList mergeDefs optionalAttrs showPath;
  inherit (options) isOption isAlias optionSchema;

  mkType = { description, schema, check, defs ? { }, nested ? null, merge ? null }: {
    _type = "type";
    inherit description schema check defs nested;
    merge =
      if merge != null then merge
      else path: value:
        if check value then value
        # Never print the value: it may be an operator secret.
        else if typeOf value == ({ string = "string"; integer = "int"; }.${schema.type or ""} or null)
        then throw "slipway: option ${showPath path}: the value is not ${description}"
        else throw "slipway: option ${showPath path}: expected ${description}, got a value of type ${typeOf value}";
  };

  # JSON Schema patterns are searched, Nix's builtins.match matches the whole
  # string; anchored patterns mean the same in both.
  anchored = pattern:
    if substring 0 1 pattern == "^" && substring (stringLength pattern - 1) 1 pattern == "$"
    then pattern
    else throw "slipway: pattern ${pattern} must start with ^ and end with $";

  # Property names a form hint mentions at its top level (if/then/else).
  hintNames = hint: concatMap
    (part: (hint.${part}.required or [ ]) ++ attrNames (hint.${part}.properties or { }))
    (builtins.filter (part: isAttrs (hint.${part} or null)) [ "if" "then" "else" ])
  ++ concatMap (part: hint.${part}.not.required or [ ]) [ "then" "else" ];
in
rec {
  bool = mkType { description = "a boolean"; schema = { type = "boolean"; }; check = isBool; };

  int = intBetween null null;
  intBetween = min: max:
    let
      type = mkType {
        description = "an integer"
          + (if min != null then " >= ${toString min}" else "")
          + (if max != null then " <= ${toString max}" else "");
        schema = { type = "integer"; }
          // optionalAttrs (min != null) { minimum = min; }
          // optionalAttrs (max != null) { maximum = max; };
        check = v: isInt v && (min == null || v >= min) && (max == null || v <= max);
      };
    in
    type // {
      # JSON Schema's integer includes `500.0`, which fromJSON reads as a
      # float: a float with no fraction is that integer.
      merge = path: value: type.merge path (if isFloat value && floor value == value then floor value else value);
    };

  str = mkType { description = "a string"; schema = { type = "string"; }; check = isString; };
  strMatching = pattern: mkType {
    description = "a string matching ${pattern}";
    schema = { type = "string"; pattern = anchored pattern; };
    check = v: isString v && match pattern v != null;
  };

  enum = values: mkType {
    description = "one of ${builtins.toJSON values}";
    schema = optionalAttrs (all isString values) { type = "string"; } // { enum = values; };
    check = v: elem v values;
  };

  listOf = elemType: mkType {
    description = "a list";
    schema = { type = "array"; items = elemType.schema; };
    check = isList;
    inherit (elemType) defs;
    nested = { kind = "element"; type = elemType; };
    merge = path: value:
      if !isList value then throw "slipway: option ${showPath path}: expected a list, got a value of type ${typeOf value}"
      else genList (i: elemType.merge (path ++ [ (toString i) ]) (builtins.elemAt value i)) (length value);
  };

  attrsOf = elemType: mkType {
    description = "an object";
    schema = { type = "object"; additionalProperties = elemType.schema; };
    check = isAttrs;
    inherit (elemType) defs;
    nested = { kind = "element"; type = elemType; };
    merge = path: value:
      if !isAttrs value then throw "slipway: option ${showPath path}: expected an object, got a value of type ${typeOf value}"
      else mapAttrs (k: v: elemType.merge (path ++ [ k ]) v) value;
  };

  # A JSON value that carries a JSON Schema as it is (an upstream settings
  # file, for instance). The module system does not look inside: renames of
  # keys in it are declared beside the application (`valueRenames`), and
  # Slipway validates it against `schema`.
  json = schema: mkType {
    description = "a JSON value";
    inherit schema;
    check = _: true;
  };

  # A sealed object of options (additionalProperties: false). `hints` are form
  # hints: JSON Schema `{ if; then; else?; }` fragments naming options of this
  # object (one hint sits in the object itself, several go in allOf).
  object = { options, hints ? [ ] }:
    let
      fields = filterAttrs (_: isOption) options;
      aliases = filterAttrs (_: isAlias) options;
      required = attrNames (filterAttrs (_: o: o.required) fields);
      badHints = builtins.filter (n: !(fields ? ${n})) (concatMap hintNames hints);
    in
    if badHints != [ ] then throw "slipway: a form hint names ${builtins.head badHints}, which is not an option here"
    else mkType {
      description = "an object";
      schema = {
        type = "object";
        additionalProperties = false;
        properties = mapAttrs (_: optionSchema) fields;
      }
      // optionalAttrs (required != [ ]) { inherit required; }
      // (if length hints == 1 then builtins.head hints
          else optionalAttrs (hints != [ ]) { allOf = hints; });
      check = isAttrs;
      defs = mergeDefs (mapAttrsToList (_: o: o.type.defs) fields);
      nested = { kind = "object"; inherit options; };
      merge = path: value:
        let
          unknown = builtins.filter (k: !(fields ? ${k})) (attrNames (if isAttrs value then value else { }));
          here = k: showPath (path ++ [ k ]);
          complain = k:
            if aliases ? ${k}
            then "slipway: option ${here k} was renamed to ${showPath (path ++ aliases.${k}.to)}; migrate the configuration first"
            else "slipway: option ${here k} does not exist";
          fieldValue = k: o:
            if isAttrs value && value ? ${k} then [ { name = k; value = o.type.merge (path ++ [ k ]) value.${k}; } ]
            else if o ? default then [ { name = k; value = o.type.merge (path ++ [ k ]) o.default; } ]
            else if o.required then throw "slipway: option ${here k} is required"
            else [ ];
        in
        if !isAttrs value then throw "slipway: option ${showPath path}: expected an object, got a value of type ${typeOf value}"
        else if unknown != [ ] then throw (complain (builtins.head unknown))
        else builtins.listToAttrs (concatMap (k: fieldValue k fields.${k}) (attrNames fields));
    };

  # A type published under $defs/<name> and referenced as {"$ref": "#/$defs/<name>"}.
  named = name: type: type // {
    schema = { "$ref" = "#/$defs/${name}"; };
    defs = mergeDefs [ type.defs { ${name} = type.schema; } ];
  };
}
