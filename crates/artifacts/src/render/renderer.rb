# kubosh's job template renderer (written for kubosh; Ruby standard library only).
#
# Renders BOSH job templates with the semantics of the BOSH Director's template evaluation
# context (`p`, `if_p`, `spec`, `link`, `if_link`, ...), many job instances per process.
#
# Input (stdin), one JSON document:
#   {"jobs":  [{"release": {"name", "version"}, "job": "<name>",
#               "templates": [{"source_path", "destination", "text"}], "monit": "<text>"|null}],
#    "units": [{"job": <index into jobs>, "context": <template spec of one instance's job>}],
#    "dns":   {...optional tables for link(...).address, see KuboshRender::DnsEncoder}}
# Output (stdout), one JSON document, results in unit order:
#   {"results": [{"monit": "...", "files": [{"source_path", "destination", "content"}]}
#              | {"errors": [{"release", "job", "template", "line", "message"}]}]}
#
# The context is the template spec after property filtering: `properties` are this job's
# properties and `links` this job's consumed links. A failing unit does not stop the others.

require 'erb'
require 'json'
require 'ostruct'
require 'yaml'
require 'shellwords'
%w[base64 digest securerandom set].each do |lib|
  begin
    require lib
  rescue LoadError
    nil
  end
end

# Templates written for the Director may use ActiveSupport's `blank?`/`present?`, which the
# Director loads for them. Define them (with ActiveSupport's meaning) when nothing else has.
unless Object.method_defined?(:blank?)
  class Object
    def blank?
      respond_to?(:empty?) ? !!empty? : !self
    end

    def present?
      !blank?
    end

    def presence
      self if present?
    end
  end

  class NilClass
    def blank?
      true
    end
  end

  class FalseClass
    def blank?
      true
    end
  end

  class TrueClass
    def blank?
      false
    end
  end

  class Numeric
    def blank?
      false
    end
  end

  class String
    def blank?
      empty? || /\A[[:space:]]*\z/.match?(self)
    end
  end
end

module KuboshRender
  # `p` found none of the names. The text is the Director's: the names print as a Ruby array.
  class UnknownProperty < StandardError
    def initialize(names)
      super("Can't find property '#{names}'")
    end
  end

  class UnknownLink < StandardError
    def initialize(name)
      super("Can't find link '#{name}'")
    end
  end

  # Dotted-name lookup, exactly as permissive as the Director's (`ref[key]` on whatever is
  # there, so a string answers a substring lookup and a number raises).
  module Lookup
    def lookup_property(collection, name)
      return nil if collection.nil?

      ref = collection
      name.split('.').each do |key|
        ref = ref[key]
        return nil if ref.nil?
      end
      ref
    end

    # `p(name)`, `p(name, default)`, `p([names])`, `p([names], default)`.
    def lookup_first(collection, args)
      names = Array(args[0])
      names.each do |name|
        value = lookup_property(collection, name)
        return value unless value.nil?
      end
      return args[1] if args.length == 2

      raise UnknownProperty, names
    end

    # Yields the values when every name is set, and answers the `else` side.
    def run_if_p(collection, names)
      values = []
      names.each do |name|
        value = lookup_property(collection, name)
        return ActiveElseBlock.new(self) if value.nil?

        values << value
      end
      yield(*values)
      InactiveElseBlock.new
    end
  end

  # What `if_p`/`if_link` answer when their block did not run: `else` and `else_if_*` run.
  class ActiveElseBlock
    def initialize(context)
      @context = context
    end

    def else
      yield
    end

    def else_if_p(*names, &block)
      @context.if_p(*names, &block)
    end

    def else_if_link(name, &block)
      @context.if_link(name, &block)
    end
  end

  # What `if_p`/`if_link` answer when their block ran: nothing further runs.
  class InactiveElseBlock
    def else; end

    def else_if_p(*_names)
      InactiveElseBlock.new
    end

    def else_if_link(_name)
      InactiveElseBlock.new
    end
  end

  # `spec`: an OpenStruct whose `methods(false)` lists its keys (templates use
  # `spec.networks.methods(false)` to enumerate networks).
  class SpecStruct < OpenStruct
    def methods(regular = true)
      regular ? super(regular) : marshal_dump.keys.map(&:to_sym)
    end
  end

  def self.structify(object, klass = OpenStruct)
    case object
    when Hash then klass.new(object.transform_values { |v| structify(v, klass) })
    when Array then object.map { |v| structify(v, klass) }
    else object
    end
  end

  # Builds DNS queries for `link(...).address`, as the Director's encoder does, from the ids
  # kubosh assigned: {"az_ids": {az: n}, "network_ids": {net: n}, "instance_ids": {uuid: n},
  # "groups": [{"group_type", "group_name", "deployment", "id"}], "short_dns": bool}.
  class DnsEncoder
    HEALTH = { 'healthy' => 3, 'unhealthy' => 1, 'all' => 4, 'default' => 0 }.freeze

    def initialize(tables)
      @az_ids = tables['az_ids'] || {}
      @network_ids = tables['network_ids'] || {}
      @instance_ids = tables['instance_ids'] || {}
      @groups = {}
      (tables['groups'] || []).each do |g|
        @groups[[g['group_type'], g['group_name'], g['deployment']]] = g['id']
      end
    end

    def encode_query(criteria, use_short_dns)
      labels = []
      labels << (criteria[:uuid].nil? || use_short_dns ? "q-#{slug(criteria, use_short_dns)}" : criteria[:uuid])
      if use_short_dns
        labels << "q-g#{@groups[[criteria[:group_type], criteria[:group_name], criteria[:deployment_name]]]}"
      else
        labels.concat([criteria.fetch(:group_name), criteria.fetch(:default_network),
                       criteria.fetch(:deployment_name)].map { |s| canonical(s) })
      end
      labels << criteria[:root_domain]
      labels.join('.')
    end

    private

    def known(table, what, key)
      return nil if key.nil?

      id = table[key]
      raise "Unknown #{what}: '#{key}'" if id.nil?

      id.to_s
    end

    def slug(criteria, use_short_dns)
      parts = (criteria[:azs] || []).map { |az| "a#{known(@az_ids, 'AZ', az)}" }
      if use_short_dns
        parts << "m#{known(@instance_ids, 'instance UUID', criteria[:uuid])}" unless criteria[:uuid].nil?
        unless criteria[:default_network].nil?
          parts << "n#{known(@network_ids, 'Network', criteria[:default_network])}"
        end
      end
      case criteria[:initial_health_check]
      when 'synchronous' then parts << 'y1'
      when 'asynchronous' then parts << 'y0'
      end
      parts << "s#{HEALTH.fetch(criteria[:status], 0)}"
      parts.sort.join
    end

    def canonical(name)
      s = name.to_s.downcase.tr('_', '-').gsub(/[^a-z0-9-]/, '')
      raise "Invalid DNS canonical name '#{s}', cannot start with a hyphen" if s.start_with?('-')
      raise "Invalid DNS canonical name '#{s}', cannot end with a hyphen" if s.end_with?('-')

      s
    end
  end

  # A link's address is given (manual links): every query answers it.
  class FixedAddress
    def initialize(address)
      @address = address
    end

    def encode_query(*_args)
      @address
    end
  end

  # One instance of a consumed link.
  class LinkInstance
    include Lookup
    attr_reader :name, :index, :id, :az, :address, :properties, :bootstrap

    def initialize(spec)
      @name = spec['name']
      @index = spec['index']
      @id = spec['id']
      @az = spec['az']
      @address = spec['address']
      @properties = spec['properties']
      @bootstrap = spec['bootstrap']
    end

    def p(*args)
      lookup_first(@properties, args)
    end

    def if_p(*names, &block)
      run_if_p(@properties, names, &block)
    end
  end

  # `link(name)`: the provider's instances and properties, and DNS queries for the group.
  class Link
    include Lookup
    attr_reader :instances, :properties

    def initialize(spec, dns_encoder)
      @instances = spec['instances'].map { |i| LinkInstance.new(i || {}) }
      @properties = spec['properties']
      @encoder = spec.key?('address') ? FixedAddress.new(spec['address']) : dns_encoder
      if spec.fetch('use_link_dns_names', false)
        @group_name = spec['group_name']
        @group_type = 'link'
      else
        @group_name = spec['instance_group']
        @group_type = 'instance-group'
      end
      @default_network = spec['default_network']
      @deployment_name = spec['deployment_name']
      @root_domain = spec['domain']
      @use_short_dns = spec.fetch('use_short_dns_addresses', false)
    end

    def p(*args)
      lookup_first(@properties, args)
    end

    def if_p(*names, &block)
      run_if_p(@properties, names, &block)
    end

    def address(criteria = {})
      raise NotImplementedError, 'link.address requires bosh director' if @encoder.nil?

      @encoder.encode_query(criteria.merge(group_name: @group_name, group_type: @group_type,
                                           default_network: @default_network,
                                           deployment_name: @deployment_name,
                                           root_domain: @root_domain), @use_short_dns)
    end
  end

  # The object templates are evaluated against (`self` in a template).
  class EvaluationContext
    include Lookup
    attr_reader :name, :index, :raw_properties

    def initialize(spec, dns_encoder)
      @name = spec['name']
      @index = spec['index']
      @spec_hash = spec
      @raw_properties = spec['properties'] || {}
      @links = spec['links'] || {}
      @dns_encoder = dns_encoder
    end

    # `spec` and `properties` are built on first use: building OpenStructs is most of the cost
    # of a context, and many templates use neither. (One difference from the Director: a
    # template that changes an array or hash returned by `p` before it first uses `spec` sees
    # the change in `spec.properties`.)
    def spec
      @spec ||= KuboshRender.structify(@spec_hash, SpecStruct)
    end

    def properties
      @properties ||= KuboshRender.structify(@raw_properties)
    end

    # Error messages (NameError, NoMethodError) print the receiver: never its properties.
    def inspect
      '#<EvaluationContext>'
    end
    alias to_s inspect

    def get_binding
      binding
    end

    def p(*args)
      lookup_first(@raw_properties, args)
    end

    def if_p(*names, &block)
      run_if_p(@raw_properties, names, &block)
    end

    def link(name)
      link_spec = lookup_property(@links, name)
      raise UnknownLink, name if link_spec.nil? || !link_spec.key?('instances')

      Link.new(link_spec, @dns_encoder)
    end

    def if_link(name)
      link_spec = lookup_property(@links, name)
      return ActiveElseBlock.new(self) if link_spec.nil? || !link_spec.key?('instances')

      yield Link.new(link_spec, @dns_encoder)
      InactiveElseBlock.new
    end
  end

  # A job's templates, compiled once and rendered for every unit of the batch.
  class CompiledJob
    attr_reader :release, :name

    Template = Struct.new(:source_path, :destination, :erb, :method, :compile_error)

    @@methods = 0

    def initialize(job)
      @release = job['release'] || {}
      @name = job['job'].to_s
      @monit = job['monit'].nil? ? nil : compile('monit', nil, job['monit'])
      @templates = (job['templates'] || []).map do |t|
        compile(t['source_path'].to_s, t['destination'].to_s, t['text'].to_s)
      end
    end

    def render(context_hash, dns_encoder)
      if @monit
        monit, error = render_one(@monit, context_hash, dns_encoder)
        return { 'errors' => [error] } if error
      end
      files = []
      errors = []
      @templates.each do |t|
        content, error = render_one(t, context_hash, dns_encoder)
        if error
          errors << error
        else
          files << { 'source_path' => t.source_path, 'destination' => t.destination, 'content' => content }
        end
      end
      return { 'errors' => errors } unless errors.empty?

      { 'monit' => monit || '', 'files' => files }
    end

    private

    def filename(source_path)
      File.join(@name, source_path)
    end

    # The template also becomes a method of the context, so Ruby parses it once per batch
    # rather than once per instance. Code that cannot live in a method body (assigning a
    # constant) keeps the Director's way, `result(binding)`, as do syntax errors (reported
    # when rendering, per unit).
    def compile(source_path, destination, text)
      erb = ERB.new(text, trim_mode: '-')
      erb.filename = filename(source_path)
      method = "__kubosh_template_#{@@methods += 1}"
      begin
        erb.def_method(EvaluationContext, "#{method}()", erb.filename)
      rescue SyntaxError
        method = nil
      end
      Template.new(source_path, destination, erb, method, nil)
    rescue Exception => e # rubocop:disable Lint/RescueException
      Template.new(source_path, destination, nil, nil, e)
    end

    # Each template gets a fresh context (a template may change what it was given).
    def render_one(template, context_hash, dns_encoder)
      raise template.compile_error if template.compile_error

      context = EvaluationContext.new(Marshal.load(Marshal.dump(context_hash)), dns_encoder)
      content = if template.method
                  context.__send__(template.method)
                else
                  template.erb.result(context.get_binding)
                end
      unless content.dup.force_encoding(Encoding::UTF_8).valid_encoding?
        raise EncodingError, 'rendered content is not valid UTF-8'
      end

      [content.dup.force_encoding(Encoding::UTF_8), nil]
    rescue Exception => e # rubocop:disable Lint/RescueException
      [nil, describe(template.source_path, e)]
    end

    # The line is the first backtrace frame in the template, as the Director finds it; for a
    # syntax error (no such frame) it is taken from the message.
    def describe(source_path, error)
      file = filename(source_path)
      frame = (error.backtrace || []).find { |l| l.include?(file) }
      line = frame&.split(':')&.at(1)
      message = error.message.to_s
      if error.is_a?(SyntaxError)
        first = message.lines.first.to_s
        if (m = first.match(/#{Regexp.escape(file)}:(\d+): ?(.*)/))
          line ||= m[1]
          message = m[2]
        end
      end
      line = Integer(line, exception: false) if line
      { 'release' => @release, 'job' => @name, 'template' => source_path,
        'line' => line, 'message' => message.strip }
    end
  end

  def self.run(input)
    batch = JSON.parse(input)
    encoder = batch['dns'] ? DnsEncoder.new(batch['dns']) : nil
    jobs = (batch['jobs'] || []).map { |j| CompiledJob.new(j) }
    results = (batch['units'] || []).map do |unit|
      job = jobs[unit['job'].to_i]
      if job.nil?
        { 'errors' => [{ 'release' => {}, 'job' => '', 'template' => '', 'line' => nil,
                         'message' => "unit refers to unknown job #{unit['job']}" }] }
      else
        job.render(unit['context'] || {}, encoder)
      end
    end
    { 'results' => results }
  end
end

if $PROGRAM_NAME == __FILE__
  # Templates that print must not corrupt the answer: fd 1 becomes stderr while rendering.
  answer = $stdout.dup
  $stdout.reopen($stderr)
  begin
    output = JSON.generate(KuboshRender.run($stdin.read))
  rescue Exception => e # rubocop:disable Lint/RescueException
    # Not a template's error (those are per unit): the batch itself could not be handled.
    output = JSON.generate({ 'fatal' => "#{e.class}: #{e.message}"[0, 500] })
  end
  answer.write(output)
  answer.flush
end
